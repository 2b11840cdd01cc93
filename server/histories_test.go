package server

import (
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// isPushed holds for a run from the claim this server pushed until the
// checkpoint that ends its lease drops the entry; a write of another lease
// (a claim that did not come through this server) is not one pushed here.
func TestIsPushed(t *testing.T) {
	lh := newLeaseHistories(time.Now)
	run := &store.Run{Namespace: "ns", ID: "r1", Sequence: 7}
	lh.pushed([]*store.ClaimedRun{{Run: run, LeaseToken: 10, LeaseExpiresAt: time.Now().Add(time.Minute)}})
	if !lh.isPushed("ns", "r1") {
		t.Fatal("a pushed run is not reported pushed")
	}
	if lh.isPushed("other", "r1") || lh.isPushed("ns", "r2") {
		t.Fatal("a run of another namespace, or another run, is reported pushed")
	}
	e := lh.acquire(store.Lease{Namespace: "ns", RunID: "r1", Token: 10})
	e.mu.Unlock()
	if !lh.isPushed("ns", "r1") {
		t.Fatal("a write of the pushed lease made the run not pushed")
	}
	lh.drop(store.Lease{Namespace: "ns", RunID: "r1", Token: 10})
	if lh.isPushed("ns", "r1") {
		t.Fatal("the run is still reported pushed after its lease ended")
	}
	e = lh.acquire(store.Lease{Namespace: "ns", RunID: "r1", Token: 11}) // claimed elsewhere
	e.mu.Unlock()
	if lh.isPushed("ns", "r1") {
		t.Fatal("a lease this server did not push is reported pushed")
	}
}

// Past the lease its claim gave, a pushed run is no longer reported pushed:
// its worker may have vanished, and another server's worker ended it.
func TestIsPushedEndsWithTheClaimsLease(t *testing.T) {
	now := time.Now()
	lh := newLeaseHistories(func() time.Time { return now })
	lh.pushed([]*store.ClaimedRun{{Run: &store.Run{Namespace: "ns", ID: "r1"}, LeaseToken: 10, LeaseExpiresAt: now.Add(time.Second)}})
	if !lh.isPushed("ns", "r1") {
		t.Fatal("a pushed run within its lease is not reported pushed")
	}
	now = now.Add(time.Second)
	if lh.isPushed("ns", "r1") {
		t.Fatal("a pushed run whose claim's lease expired is still reported pushed")
	}
}
