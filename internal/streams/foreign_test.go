package streams_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/streams"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// The followers of one SQLite store share one poller for other processes'
// commits: each follower is woken by the poll that sees another store's commit
// on the file (here a second store value, as another process would be), and the
// poller stops when the last follower ends.
func TestFollowersShareOnePoller(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	here, elsewhere := twoStoresOnOneFile(t)
	const n = 20
	leases := make([]store.Lease, n)
	for i := range n {
		id := fmt.Sprint("r", i)
		if _, err := here.RunCreate(ctx, &store.RunCreateParams{Namespace: "ns", ID: id, WorkflowID: id, Workflow: "wf", Queue: "default"}); err != nil {
			t.Fatal(err)
		}
	}
	claimed, err := elsewhere.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "ns", Workflows: []string{"wf"}, Worker: "w", Max: n, LeaseDuration: time.Minute})
	if err != nil || len(claimed.Runs) != n {
		t.Fatalf("claim: %d runs, %v", len(claimed.Runs), err)
	}
	for i, cr := range claimed.Runs {
		leases[i] = store.Lease{Namespace: "ns", RunID: cr.Run.ID, Token: cr.LeaseToken}
	}
	if got := streams.WatchCount(); got != 0 {
		t.Fatalf("%d pollers before any follower", got)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		received = map[string][]string{}
	)
	followCtx, stopFollowing := context.WithCancel(ctx)
	errs := make(chan error, n)
	for _, l := range leases {
		wg.Go(func() {
			err := streams.Follow(followCtx, here, "ns", l.RunID, 0, streams.Options{Poll: 5 * time.Millisecond}, func(ev *store.StreamEvent) error {
				mu.Lock()
				defer mu.Unlock()
				received[l.RunID] = append(received[l.RunID], ev.Name)
				return nil
			})
			errs <- err
		})
	}
	for _, l := range leases {
		if _, err := elsewhere.Checkpoint(ctx, &store.CheckpointParams{Lease: l, Status: store.StatusRunning,
			Stream: []store.StreamWrite{{Name: "progress", Data: []byte(`1`)}}}); err != nil {
			t.Fatal(err)
		}
	}
	for {
		mu.Lock()
		all := 0
		for _, evs := range received {
			if len(evs) == 1 && evs[0] == "progress" {
				all++
			}
		}
		mu.Unlock()
		if all == n {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of %d followers received the event written elsewhere", all, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if got := streams.WatchCount(); got != 1 {
		t.Errorf("%d pollers for %d followers of one store, want 1", got, n)
	}
	stopFollowing()
	wg.Wait()
	close(errs)
	for err := range errs {
		if !errors.Is(err, context.Canceled) { // perhaps cancelled mid-read, wrapped
			t.Errorf("Follow: %v, want context.Canceled", err)
		}
	}
	if got := streams.WatchCount(); got != 0 {
		t.Errorf("%d pollers after every follower ended, want 0", got)
	}
}

// unhashable is a store value that cannot be a map key (a slice field): its
// follower polls on a watch of its own.
type unhashable struct {
	*storesqlite.Store
	tags []string
}

// A follower of a store value that cannot be a map key gets a poller of its
// own, which still carries other processes' commits and stops with it.
func TestFollowerOfAnUnhashableStore(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	first, elsewhere := twoStoresOnOneFile(t)
	here := unhashable{Store: first, tags: []string{"a"}}
	if _, err := here.RunCreate(ctx, &store.RunCreateParams{Namespace: "ns", ID: "r", WorkflowID: "r", Workflow: "wf", Queue: "default"}); err != nil {
		t.Fatal(err)
	}
	claimed, err := elsewhere.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "ns", Workflows: []string{"wf"}, Worker: "w", Max: 1, LeaseDuration: time.Minute})
	if err != nil || len(claimed.Runs) != 1 {
		t.Fatalf("claim: %+v, %v", claimed, err)
	}
	done := make(chan error, 1)
	go func() {
		done <- streams.Follow(ctx, here, "ns", "r", 0, streams.Options{Poll: 5 * time.Millisecond}, func(*store.StreamEvent) error { return nil })
	}()
	lease := store.Lease{Namespace: "ns", RunID: "r", Token: claimed.Runs[0].LeaseToken}
	if _, err := elsewhere.Checkpoint(ctx, &store.CheckpointParams{Lease: lease, Status: store.StatusSucceeded, Output: []byte(`1`)}); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Follow: %v", err)
	}
	if got := streams.WatchCount(); got != 0 {
		t.Fatalf("%d shared pollers, want 0", got)
	}
}
