package storepg

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// TestNoDeadlockExtendingWhileCheckpointing runs heartbeats (LeasesExtend of
// every lease, in shuffled order) beside batches of checkpoints of the same runs
// (also in shuffled order). Both lock many running runs in one statement; they
// must lock them in one order, or each may hold a run the other waits for.
// The store's sessions run with deadlock_timeout set to an hour, so a deadlock
// is not broken by Postgres within the test: it shows as calls that end with
// their context's deadline instead of within milliseconds.
func TestNoDeadlockExtendingWhileCheckpointing(t *testing.T) {
	s, _ := openPlanSchema(t, "&deadlock_timeout=3600s")
	ctx := t.Context()

	const runs = 300
	for i := range runs {
		id := fmt.Sprintf("run-%03d", i)
		if _, err := s.RunCreate(ctx, &store.RunCreateParams{Namespace: "default", ID: id, WorkflowID: id, Workflow: "wf", Queue: "default"}); err != nil {
			t.Fatal(err)
		}
	}
	claimed, err := s.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "default", Workflows: []string{"wf"}, Worker: "w", Max: runs, LeaseDuration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if len(claimed.Runs) != runs {
		t.Fatalf("claimed %d runs, want %d", len(claimed.Runs), runs)
	}
	leases := make([]store.Lease, runs)
	for i, c := range claimed.Runs {
		leases[i] = store.Lease{Namespace: "default", RunID: c.Run.ID, Token: c.LeaseToken}
	}

	const rounds = 20
	call := func(f func(context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		return f(cctx)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	wg.Go(func() {
		for range rounds {
			ls := append([]store.Lease(nil), leases...)
			rand.Shuffle(len(ls), func(i, j int) { ls[i], ls[j] = ls[j], ls[i] })
			err := call(func(ctx context.Context) error {
				res, err := s.LeasesExtend(ctx, &store.LeasesExtendParams{Leases: ls, Duration: time.Minute})
				if err == nil && len(res.Lost) > 0 {
					err = fmt.Errorf("%d leases lost", len(res.Lost))
				}
				return err
			})
			if err != nil {
				errs <- fmt.Errorf("extending leases: %w", err)
				return
			}
		}
	})
	const checkpointers = 30
	for g := range checkpointers {
		wg.Go(func() {
			mine := make([]store.Lease, 0, runs/checkpointers)
			for i := g; i < runs; i += checkpointers {
				mine = append(mine, leases[i])
			}
			for range rounds {
				rand.Shuffle(len(mine), func(i, j int) { mine[i], mine[j] = mine[j], mine[i] })
				for _, l := range mine {
					err := call(func(ctx context.Context) error {
						_, err := s.Checkpoint(ctx, &store.CheckpointParams{Lease: l, Status: store.StatusRunning})
						return err
					})
					if err != nil {
						errs <- fmt.Errorf("checkpointing %s: %w", l.RunID, err)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
