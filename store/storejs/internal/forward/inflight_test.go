package forward_test

import (
	"context"
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store/storejs/internal/forward"
)

// TestInFlightBound: no more than MaxInFlight requests run at once; the next
// ones wait for a slot and then run, none lost.
func TestInFlightBound(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	const extra = 20
	var running, peak, started atomic.Int64
	full, release := make(chan struct{}), make(chan struct{})
	serve(t, ns, "fwd.bound", func(context.Context, string, json.RawMessage) (any, uint64, error) {
		n := running.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		if started.Add(1) == forward.MaxInFlight {
			close(full)
		}
		<-release
		running.Add(-1)
		return nil, 0, nil
	})
	c := &forward.Client{NC: connect(t, ns), Subject: "fwd.bound"}
	before := inMsgs(t, ns)
	errs := make(chan error, forward.MaxInFlight+extra)
	for range forward.MaxInFlight + extra {
		go func() { errs <- c.Call(context.Background(), "w", nil, nil) }()
	}
	<-full
	// Every request reached the NATS server; none of the extra ones may start
	// while the slots are taken: give one that wrongly would the time to.
	eventually(t, "every request at the server", func() bool { return inMsgs(t, ns)-before >= forward.MaxInFlight+extra })
	time.Sleep(100 * time.Millisecond)
	if n := started.Load(); n != forward.MaxInFlight {
		t.Fatalf("%d requests started with %d slots", n, forward.MaxInFlight)
	}
	close(release)
	for range forward.MaxInFlight + extra {
		if err := <-errs; err != nil {
			t.Fatalf("Call: %v", err)
		}
	}
	if p := peak.Load(); p != forward.MaxInFlight {
		t.Fatalf("peak of %d requests at once, want %d", p, forward.MaxInFlight)
	}
}

// TestStopAnswersQueuedRequests: requests queued behind a full server when it
// stops are answered not_leader, not dropped, so their callers go to the next
// server instead of waiting for their timeout and an unknown outcome.
func TestStopAnswersQueuedRequests(t *testing.T) {
	t.Parallel()
	ns := startNATS(t)
	const extra = 50
	var started atomic.Int64
	full, release := make(chan struct{}), make(chan struct{})
	stop := serve(t, ns, "fwd.queued", func(context.Context, string, json.RawMessage) (any, uint64, error) {
		if started.Add(1) == forward.MaxInFlight {
			close(full)
		}
		<-release
		return nil, 0, nil
	})
	c := &forward.Client{NC: connect(t, ns), Subject: "fwd.queued", Timeout: 5 * time.Second}
	before := inMsgs(t, ns)
	errs := make(chan error, forward.MaxInFlight+extra)
	for range forward.MaxInFlight + extra {
		go func() { errs <- c.Call(context.Background(), "w", nil, nil) }()
	}
	<-full
	eventually(t, "every request at the server", func() bool { return inMsgs(t, ns)-before >= forward.MaxInFlight+extra })
	stopped := make(chan struct{})
	go func() { stop(); close(stopped) }()
	var next atomic.Int64
	serve(t, ns, "fwd.queued", func(context.Context, string, json.RawMessage) (any, uint64, error) {
		next.Add(1)
		return nil, 0, nil
	})
	close(release)
	for range forward.MaxInFlight + extra {
		if err := <-errs; err != nil {
			t.Fatalf("Call: %v", err)
		}
	}
	<-stopped
	if n := next.Load(); n < extra {
		t.Fatalf("the next server answered %d requests, want the %d queued ones at least", n, extra)
	}
}
