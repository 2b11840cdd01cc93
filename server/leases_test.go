package server

import (
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// The lease count follows grants, extensions, losses and ends, and forgets a
// lease whose expiry passed without an extension (its worker vanished).
func TestLeaseCounter(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	lc := newLeaseCounter(func() time.Time { return now })
	claimed := func(id string, token int64) *store.ClaimedRun {
		return &store.ClaimedRun{Run: &store.Run{Namespace: "ns", ID: id}, LeaseToken: token, LeaseExpiresAt: now.Add(10 * time.Second)}
	}
	lease := func(id string, token int64) store.Lease { return store.Lease{Namespace: "ns", RunID: id, Token: token} }
	lc.granted([]*store.ClaimedRun{claimed("a", 1), claimed("b", 1), claimed("c", 1)}, "w")
	if n := lc.count(); n != 3 {
		t.Fatalf("after 3 grants: %d", n)
	}
	lc.ended(lease("a", 2)) // an older or newer token is not this lease
	lc.ended(lease("b", 1))
	if n := lc.count(); n != 2 {
		t.Fatalf("after one end: %d", n)
	}
	lc.extended([]store.Lease{lease("a", 1), lease("c", 1), lease("d", 4)}, []string{"c"}, now.Add(20*time.Second))
	if n := lc.count(); n != 2 { // a, and d extended here after a reconnect; c lost
		t.Fatalf("after extending a and d and losing c: %d", n)
	}
	// A heartbeat the store applied before the checkpoint that ended the
	// lease, answered after it, does not count the lease again; a new claim's
	// lease of the run (another token) counts.
	lc.ended(lease("a", 1))
	lc.extended([]store.Lease{lease("a", 1)}, nil, now.Add(20*time.Second))
	if n := lc.count(); n != 1 {
		t.Fatalf("after a late heartbeat of an ended lease: %d, want 1 (d)", n)
	}
	lc.extended([]store.Lease{lease("a", 5)}, nil, now.Add(20*time.Second))
	if n := lc.count(); n != 2 {
		t.Fatalf("after a heartbeat of a new lease of the run: %d, want 2", n)
	}
	now = now.Add(20 * time.Second)
	if n := lc.count(); n != 0 {
		t.Fatalf("after every expiry: %d", n)
	}
}

// The counter keeps the workflow of a lease it granted through extensions and
// its end, forgets it for another token, and learns it for a lease first seen
// in a heartbeat.
func TestLeaseCounterWorkflow(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	lc := newLeaseCounter(func() time.Time { return now })
	lease := func(token int64) store.Lease { return store.Lease{Namespace: "ns", RunID: "r", Token: token} }
	lc.granted([]*store.ClaimedRun{{Run: &store.Run{Namespace: "ns", ID: "r", Workflow: "wf"}, LeaseToken: 1, LeaseExpiresAt: now.Add(time.Minute)}}, "w")
	lc.extended([]store.Lease{lease(1)}, nil, now.Add(2*time.Minute))
	if wf := workflowOf(lc, lease(1)); wf != "wf" {
		t.Fatalf("after an extension: %q", wf)
	}
	if wf, first := lc.wrote(lease(1), true); wf != "wf" || !first {
		t.Fatalf("the end: %q, first %v", wf, first)
	}
	if wf, first := lc.wrote(lease(1), true); wf != "wf" || first { // a retried release
		t.Fatalf("the end again: %q, first %v; want the workflow, not a first end", wf, first)
	}
	if wf := workflowOf(lc, lease(1)); wf != "wf" {
		t.Fatalf("after the end: %q", wf)
	}
	if wf := workflowOf(lc, lease(2)); wf != "" {
		t.Fatalf("another token: %q", wf)
	}
	lc.extended([]store.Lease{lease(2)}, nil, now.Add(time.Minute)) // a reconnected worker's lease
	if wf := workflowOf(lc, lease(2)); wf != "" {
		t.Fatalf("a lease seen in a heartbeat: %q", wf)
	}
	lc.learned(lease(2), "wf2")
	if wf := workflowOf(lc, lease(2)); wf != "wf2" {
		t.Fatalf("after learning it: %q", wf)
	}
}

// workflowOf is the workflow lc knows for l, through a write that ends nothing.
func workflowOf(lc *leaseCounter, l store.Lease) string {
	wf, _ := lc.wrote(l, false)
	return wf
}

// A heartbeat of an older lease answered after the run was claimed again does
// not replace the newer lease, whose end then ends the count.
func TestLeaseCounterOlderHeartbeat(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	lc := newLeaseCounter(func() time.Time { return now })
	lease := func(token int64) store.Lease { return store.Lease{Namespace: "ns", RunID: "r", Token: token} }
	lc.granted([]*store.ClaimedRun{{Run: &store.Run{Namespace: "ns", ID: "r", Workflow: "wf"}, LeaseToken: 2, LeaseExpiresAt: now.Add(time.Minute)}}, "w")
	lc.extended([]store.Lease{lease(1)}, nil, now.Add(time.Minute))
	if wf := workflowOf(lc, lease(2)); wf != "wf" {
		t.Fatalf("the newer lease after an older heartbeat: workflow %q", wf)
	}
	lc.ended(lease(2))
	if n := lc.count(); n != 0 {
		t.Fatalf("after the newer lease ended: %d leases, want 0", n)
	}
}

// A worker's lease that nears its expiry without an extension holds its claim
// streams back until it lapses (lapsingIn), and is then seen lapsed; one
// extended in time is neither; leases of other workers and ended ones do not
// count.
func TestLeaseCounterLapsing(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	opened := now
	lc := newLeaseCounter(func() time.Time { return now })
	closeStream := lc.openStream("ns", "w")
	defer closeStream()
	claimed := func(id string, token int64, lease time.Duration) *store.ClaimedRun {
		return &store.ClaimedRun{Run: &store.Run{Namespace: "ns", ID: id}, LeaseToken: token, LeaseExpiresAt: now.Add(lease)}
	}
	const margin = 100 * time.Millisecond
	if d := lc.lapsingIn("ns", "w", margin); d != 0 {
		t.Fatalf("no lease: lapsing in %v", d)
	}
	lc.granted([]*store.ClaimedRun{claimed("a", 1, time.Second), claimed("b", 1, 2*time.Second)}, "w")
	lc.granted([]*store.ClaimedRun{claimed("c", 1, 500*time.Millisecond)}, "other")
	lc.granted([]*store.ClaimedRun{claimed("e", 1, 300*time.Millisecond)}, "w")
	lc.ended(store.Lease{Namespace: "ns", RunID: "e", Token: 1})
	if d := lc.lapsingIn("ns", "w", margin); d != 0 {
		t.Fatalf("a second before the first expiry: lapsing in %v", d)
	}
	now = now.Add(950 * time.Millisecond)
	if d := lc.lapsingIn("ns", "w", margin); d != 50*time.Millisecond {
		t.Fatalf("50 ms before a's expiry: lapsing in %v, want 50ms", d)
	}
	if lc.lapsedSince("ns", "w", opened) {
		t.Fatal("lapsed before the expiry")
	}
	// a heartbeat extends a: b's expiry is the next.
	lc.extended([]store.Lease{{Namespace: "ns", RunID: "a", Token: 1}}, nil, now.Add(5*time.Second))
	if d := lc.lapsingIn("ns", "w", margin); d != 0 {
		t.Fatalf("after the heartbeat: lapsing in %v", d)
	}
	now = now.Add(time.Second)
	if d := lc.lapsingIn("ns", "w", margin); d != 50*time.Millisecond {
		t.Fatalf("50 ms before b's expiry: lapsing in %v, want 50ms", d)
	}
	now = now.Add(50 * time.Millisecond)
	if !lc.lapsedSince("ns", "w", opened) {
		t.Fatal("b's expiry passed: not lapsed")
	}
	if lc.lapsedSince("ns", "w", now) || lc.lapsedSince("ns", "other", opened.Add(time.Second)) {
		t.Fatal("lapsed for a stream opened after the lapse, or for a worker without a stream here")
	}
}
