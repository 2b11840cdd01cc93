package storetest

import (
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
}

func (e *env) subscribe(topic string) <-chan struct{} {
	ch, stop := e.st.Subscribe(topic)
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
	if err := e.st.LeaseRelease(e.ctx, &store.LeaseReleaseParams{Lease: leaseOf(cr)}); err != nil {
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
