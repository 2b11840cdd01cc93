package trellis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// A Cancel that returns nil must end the run, whatever state it is in or enters:
// these tests race Cancel against every kind of wait, from the process that runs
// the workflows and from another one, and wait (bounded) for every run to end
// cancelled. Without the fix, runs cancelled as they began to wait stayed waiting
// until the wait ended on its own (an hour here).

// cancelWaitTimeout bounds the wait for a cancelled run's end: generous, since a
// lost cancellation would keep the run waiting for an hour.
const cancelWaitTimeout = 30 * time.Second

// waitKinds returns one workflow per kind of wait, by kind, and every workflow to
// register (with the child they start).
func waitKinds() (map[string]*trellis.Workflow[int, int], []trellis.Registrable) {
	waiter := trellis.NewWorkflow("race-waiter", func(wc *trellis.Context, _ int) (int, error) {
		return trellis.WaitEvent[int](wc, "never", 0)
	})
	failing := func(context.Context) (int, error) { return 0, errBoom }
	kinds := map[string]func(wc *trellis.Context) (int, error){
		"sleep-short": func(wc *trellis.Context) (int, error) {
			for range 4000 { // each below MaxInlineBackoff: waits in place
				if err := wc.Sleep(5 * time.Millisecond); err != nil {
					return 0, err
				}
			}
			return 1, nil
		},
		"sleep-long": func(wc *trellis.Context) (int, error) { return 1, wc.Sleep(time.Hour) },
		"event":      func(wc *trellis.Context) (int, error) { return trellis.WaitEvent[int](wc, "never", 0) },
		"approval": func(wc *trellis.Context) (int, error) {
			_, err := trellis.Approval(wc, "go", trellis.ApprovalOptions{})
			return 1, err
		},
		"child": func(wc *trellis.Context) (int, error) { return trellis.Child(wc, waiter, 0) },
		"map": func(wc *trellis.Context) (int, error) {
			_, err := trellis.Map(wc, waiter, []int{1, 2, 3}, trellis.MapOptions{})
			return 1, err
		},
		"backoff-inline": func(wc *trellis.Context) (int, error) { // below MaxInlineBackoff: waits in the worker
			return trellis.Step(wc, "fails", failing, trellis.StepOptions{
				Retry: trellis.RetryPolicy{MaxAttempts: 1000, Backoff: trellis.Fixed(10 * time.Millisecond)}})
		},
		"backoff-store": func(wc *trellis.Context) (int, error) { // an hour: released to the store
			return trellis.Step(wc, "fails", failing, trellis.StepOptions{
				Retry: trellis.RetryPolicy{MaxAttempts: 10, Backoff: trellis.Fixed(time.Hour)}})
		},
	}
	wfs := map[string]*trellis.Workflow[int, int]{}
	regs := []trellis.Registrable{waiter}
	for kind, fn := range kinds {
		wf := trellis.NewWorkflow("race-"+kind, func(wc *trellis.Context, _ int) (int, error) { return fn(wc) })
		wfs[kind] = wf
		regs = append(regs, wf)
	}
	return wfs, regs
}

// startAndCancel starts n runs of every kind through starter and cancels each at
// once through canceller, kinds in parallel. It returns the IDs of the runs whose
// Cancel returned nil; a run that finished first (ErrRunFinished) is not one.
func startAndCancel(t *testing.T, starter, canceller *trellis.Client, wfs map[string]*trellis.Workflow[int, int], n int) []string {
	t.Helper()
	var (
		mu        sync.Mutex
		cancelled []string
		wg        sync.WaitGroup
		errs      = make(chan error, len(wfs)*n)
	)
	for kind, wf := range wfs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				h, err := trellis.Start(context.Background(), starter, wf, 0)
				if err != nil {
					errs <- fmt.Errorf("starting %s: %w", kind, err)
					return
				}
				err = canceller.Cancel(context.Background(), h.RunID())
				if errors.Is(err, trellis.ErrRunFinished) {
					continue
				}
				if err != nil {
					errs <- fmt.Errorf("cancelling %s run %s: %w", kind, h.RunID(), err)
					return
				}
				mu.Lock()
				cancelled = append(cancelled, h.RunID())
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return cancelled
}

// wantAllCancelled waits for each run to end and fails unless it ended cancelled,
// then checks that no child run is left unfinished.
func wantAllCancelled(t *testing.T, c *trellis.Client, ids []string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cancelWaitTimeout)
	defer cancel()
	for _, id := range ids {
		run, err := c.Wait(ctx, id)
		if err != nil {
			cur, _ := c.Get(context.Background(), id)
			t.Fatalf("waiting for cancelled run %s: %v (run %+v)", id, err, cur)
		}
		if run.Status != trellis.StatusCancelled {
			t.Fatalf("cancelled run %s (%s) ended %s, want cancelled", id, run.Workflow, run.Status)
		}
	}
	kids, err := c.List(ctx, trellis.ListOptions{Workflow: "race-waiter", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kids.Runs {
		if run, err := c.Wait(ctx, k.ID); err != nil || run.Status != trellis.StatusCancelled {
			t.Fatalf("child %s of a cancelled run: %v, err %v; want cancelled", k.ID, run, err)
		}
	}
}

func TestCancelRacesEveryWait(t *testing.T) {
	t.Parallel()
	wfs, regs := waitKinds()
	c := setup(t, regs...)
	ids := startAndCancel(t, c, c, wfs, 8)
	wantAllCancelled(t, c, ids)
}

// remoteWorker opens the worker of the tests that cancel from another client. A
// worker learns of a cancellation made elsewhere from the store: at its next
// checkpoint, lease extension or release, so its heartbeats are frequent here.
func remoteWorker(t *testing.T, url string, regs ...trellis.Registrable) {
	t.Helper()
	w := open(t, url, func(cfg *trellis.Config) { cfg.Worker.HeartbeatInterval = 100 * time.Millisecond })
	register(t, w, regs...)
}

// TestCancelRacesEveryWaitFromAnotherClient starts and cancels from a client
// without a worker (another process's view: no direct dispatch, no local signal)
// on the same store.
func TestCancelRacesEveryWaitFromAnotherClient(t *testing.T) {
	t.Parallel()
	wfs, regs := waitKinds()
	url := storeURL(t)
	remoteWorker(t, url, regs...)
	c := open(t, url, func(cfg *trellis.Config) { cfg.Worker.Disabled = true })
	register(t, c, regs...)
	ids := startAndCancel(t, c, c, wfs, 8)
	wantAllCancelled(t, c, ids)
}

// TestCancelDuringAStepBeforeALongSleep cancels runs from another client while a
// step runs; the workflow then sleeps an hour. The worker learns of the
// cancellation only from the store.
func TestCancelDuringAStepBeforeALongSleep(t *testing.T) {
	t.Parallel()
	const n = 8
	started := make(chan string, n)
	gate := make(chan struct{})
	wf := trellis.NewWorkflow("step-then-sleep", func(wc *trellis.Context, _ int) (int, error) {
		if _, err := trellis.Step(wc, "gated", func(context.Context) (int, error) {
			select { // once per run; a re-execution after a lost lease must not block
			case started <- wc.RunID():
			default:
			}
			<-gate // ignores its context: the step finishes after the cancel
			return 1, nil
		}); err != nil {
			return 0, err
		}
		return 2, wc.Sleep(time.Hour)
	})
	url := storeURL(t)
	w := open(t, url) // default heartbeats: it learns of the cancel as it saves the step
	register(t, w, wf)
	c := open(t, url, func(cfg *trellis.Config) { cfg.Worker.Disabled = true })
	register(t, c, wf)
	var ids []string
	for range n {
		h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 0))
		ids = append(ids, h.RunID())
	}
	for range n {
		id := <-started
		if err := c.Cancel(ctxT(t), id); err != nil {
			t.Fatalf("cancelling %s: %v", id, err)
		}
	}
	close(gate)
	wantAllCancelled(t, c, ids)
}

// TestCancelReachesAnotherProcessWorkerAtOnce: on Postgres a cancellation made by
// another client reaches the worker holding the run by NOTIFY (store.TopicCancel),
// not at its next heartbeat: here the heartbeat is an hour away, and the running
// step's context is cancelled all the same.
func TestCancelReachesAnotherProcessWorkerAtOnce(t *testing.T) {
	t.Parallel()
	if os.Getenv(envTestStore) != "postgres" {
		t.Skip("needs a store that pushes across processes: run with TRELLIS_TEST_STORE=postgres")
	}
	started := make(chan string, 1)
	wf := trellis.NewWorkflow("cancel-push", func(wc *trellis.Context, _ int) (int, error) {
		return trellis.Step(wc, "wait", func(ctx context.Context) (int, error) {
			started <- wc.RunID()
			<-ctx.Done()
			return 0, ctx.Err()
		})
	})
	url := storeURL(t)
	w := open(t, url, func(cfg *trellis.Config) {
		cfg.Worker.LeaseDuration, cfg.Worker.HeartbeatInterval = 3*time.Hour, time.Hour
	})
	register(t, w, wf)
	c := open(t, url, func(cfg *trellis.Config) { cfg.Worker.Disabled = true })
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 0))
	<-started
	if err := c.Cancel(ctxT(t), h.RunID()); err != nil {
		t.Fatal(err)
	}
	if run := must[*trellis.Run](t)(c.Wait(ctxT(t), h.RunID())); run.Status != trellis.StatusCancelled {
		t.Fatalf("run ended %s, want cancelled", run.Status)
	}
}
