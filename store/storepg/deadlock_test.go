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

// TestExtendingWaitsHoldingNothing: a lease extension whose run another
// transaction holds extends the other leases and commits them first, then waits
// for that run in a transaction that holds nothing else (see sqlExtend). It
// joins the writers' batches, whose transactions hold other runs already: one
// that waited there, holding runs, for a run held by another process's batch
// waiting for one of those was a deadlock, broken by Postgres only after
// deadlock_timeout (1 s); it happened a few times in each run of the engine's
// tests on Postgres.
func TestExtendingWaitsHoldingNothing(t *testing.T) {
	s, conn := openPlanSchema(t, "")
	ctx := t.Context()
	var leases []store.Lease
	for _, id := range []string{"run-a", "run-b"} {
		if _, err := s.RunCreate(ctx, &store.RunCreateParams{Namespace: "default", ID: id, WorkflowID: id, Workflow: "wf", Queue: "default"}); err != nil {
			t.Fatal(err)
		}
	}
	claimed, err := s.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "default", Workflows: []string{"wf"}, Worker: "w", Max: 2, LeaseDuration: time.Minute})
	if err != nil || len(claimed.Runs) != 2 {
		t.Fatalf("RunsClaim = %+v, %v; want both runs", claimed, err)
	}
	for _, c := range claimed.Runs {
		leases = append(leases, store.Lease{Namespace: "default", RunID: c.Run.ID, Token: c.LeaseToken})
	}

	// Another transaction holds run-b.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, `SELECT 1 FROM runs WHERE id = 'run-b' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	type result struct {
		res *store.LeasesExtendResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := s.LeasesExtend(ctx, &store.LeasesExtendParams{Leases: leases, Duration: time.Hour})
		done <- result{res, err}
	}()

	// run-a's extension commits while run-b is held...
	extended := func(id string) bool {
		r, err := s.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: id})
		if err != nil {
			t.Fatal(err)
		}
		return r.LeaseExpiresAt != nil && time.Until(*r.LeaseExpiresAt) > 30*time.Minute
	}
	deadline := time.Now().Add(20 * time.Second)
	for !extended("run-a") {
		if time.Now().After(deadline) {
			t.Fatal("run-a's lease was not extended while another transaction held run-b: the extension waits holding run-a")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// ...so the other transaction can take run-a without waiting.
	if _, err := tx.Exec(ctx, `SELECT 1 FROM runs WHERE id = 'run-a' FOR UPDATE NOWAIT`); err != nil {
		t.Fatalf("locking run-a after its extension: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || len(r.res.Lost) != 0 || len(r.res.CancelRequested) != 0 {
		t.Fatalf("LeasesExtend = %+v, %v; want both leases held", r.res, r.err)
	}
	if !extended("run-b") {
		t.Fatal("run-b's lease was not extended once it was free")
	}
}
