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
	lc.granted([]*store.ClaimedRun{claimed("a", 1), claimed("b", 1), claimed("c", 1)})
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
