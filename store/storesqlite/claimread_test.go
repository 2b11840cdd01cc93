package storesqlite

import (
	"context"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// A claim's runs are read after its leases committed. What changed in between
// shows (an event sent since, a cancellation request), a run deleted in
// between is left out, the others keep the claim's order and lease tokens.
func TestClaimedRunsReadAfterTheLeases(t *testing.T) {
	ctx := context.Background()
	s := openWithRuns(t, "a", "b", "c")
	seqOf := map[string]int64{}
	for _, id := range []string{"a", "b", "c"} {
		r, err := s.RunGet(ctx, &store.RunGetParams{Namespace: "ns", Ref: id})
		if err != nil {
			t.Fatal(err)
		}
		seqOf[id] = r.Sequence
	}
	var ls *leases
	err := s.write(ctx, func(tx *wtx) error {
		var err error
		ls, err = leaseRuns(tx, "w1", tx.now.Add(time.Minute), []int64{seqOf["c"], seqOf["a"], seqOf["b"]})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Between the leases and the read: an event for c, a cancellation of a, b deleted.
	if _, err := s.EventSend(ctx, &store.EventSendParams{Namespace: "ns", Ref: "c", Name: "go"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunCancel(ctx, &store.RunCancelParams{Namespace: "ns", Ref: "a"}); err != nil {
		t.Fatal(err)
	}
	err = s.write(ctx, func(tx *wtx) error {
		_, err := tx.execRaw(`DELETE FROM runs WHERE sequence = ?`, seqOf["b"])
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got, err := loadClaimed(ctx, s.reads, ls)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Run.ID != "c" || got[1].Run.ID != "a" {
		t.Fatalf("claimed %v, want c then a", got)
	}
	for _, cr := range got {
		if cr.LeaseToken != ls.tokenOf(cr.Run.Sequence) || cr.LeaseToken == 0 || cr.Run.Status != store.StatusRunning ||
			!cr.LeaseExpiresAt.Equal(ls.expires) {
			t.Errorf("run %s: token %d (leased %d), status %s, expires %v", cr.Run.ID, cr.LeaseToken, ls.tokenOf(cr.Run.Sequence), cr.Run.Status, cr.LeaseExpiresAt)
		}
	}
	if len(got[0].Inbox) != 1 || got[0].Inbox[0].Name != "go" {
		t.Errorf("c's inbox: %v, want the event sent after the lease", got[0].Inbox)
	}
	if !got[1].Run.CancelRequested {
		t.Errorf("a: no cancellation request")
	}
}
