package storetest

import (
	"context"
	"testing"

	"github.com/trellis-dev/trellis/store"
)

// Subscriptions start before the change they expect, and every wait is bounded by
// signalTimeout: no sleeps.
var notifyCases = []testCase{
	{"ReadyOnCreate", notifyReadyOnCreate},
	{"ReadyOnRelease", notifyReadyOnRelease},
	{"ReadyOnResume", notifyReadyOnResume},
	{"RunTopicOnCheckpoint", notifyRunOnCheckpoint},
	{"RunTopicOnCancel", notifyRunOnCancel},
	{"SubscribeEndedContext", notifyEndedContext},
	{"SubscribeClosed", notifyClosed},
}

func notifyEndedContext(t *testing.T, e *env) {
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	_, _, err := e.st.Subscribe(ctx, store.TopicReady)
	wantErr(t, "Subscribe with an ended context", err, context.Canceled)
}

func notifyClosed(t *testing.T, e *env) {
	if err := e.st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	_, _, err := e.st.Subscribe(e.ctx, store.TopicReady)
	wantErr(t, "Subscribe on a closed store", err, store.ErrClosed)
}

func (e *env) subscribe(topic string) <-chan struct{} {
	ch, stop, err := e.st.Subscribe(e.ctx, topic)
	if err != nil {
		e.t.Fatalf("Subscribe(%s): %v", topic, err)
	}
	e.t.Cleanup(stop)
	return ch
}

func notifyReadyOnCreate(t *testing.T, e *env) {
	ready := e.subscribe(store.TopicReady)
	e.create()
	wantSignal(t, "TopicReady after RunCreate", ready)
}

func notifyReadyOnRelease(t *testing.T, e *env) {
	cr := e.start()
	ready := e.subscribe(store.TopicReady)
	if err := e.st.LeaseRelease(e.ctx, &store.LeaseReleaseParams{Lease: cr.Lease()}); err != nil {
		t.Fatalf("LeaseRelease: %v", err)
	}
	wantSignal(t, "TopicReady after LeaseRelease", ready)
}

func notifyRunOnCheckpoint(t *testing.T, e *env) {
	cr := e.start()
	ch := e.subscribe(store.RunTopic(ns, cr.Run.ID))
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "event"})
	wantSignal(t, "run topic after a checkpoint to waiting", ch)
}

func notifyRunOnCancel(t *testing.T, e *env) {
	cr := e.start()
	ch := e.subscribe(store.RunTopic(ns, cr.Run.ID))
	e.cancel(cr.Run.ID)
	wantSignal(t, "run topic after RunCancel", ch)
}

func notifyReadyOnResume(t *testing.T, e *env) {
	cr := e.start()
	e.block(cr)
	ready := e.subscribe(store.TopicReady)
	if _, err := e.resume(cr.Run.ID); err != nil {
		t.Fatalf("RunResume: %v", err)
	}
	wantSignal(t, "TopicReady after RunResume", ready)
}
