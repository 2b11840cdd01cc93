package trellis_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/trellis-dev/trellis"
)

// With more runs than worker slots, runs wait in the store; every caller blocked
// in Result gets its own run's output, from this process's engine or from the
// client's results watcher.
func TestResultsUnderBacklog(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("backlog", func(wc *trellis.Context, in int) (int, error) {
		return trellis.Step(wc, "double", func(context.Context) (int, error) { return 2 * in, nil })
	})
	c := open(t, storeURL(t), func(cfg *trellis.Config) { cfg.Worker.Concurrency = 4; cfg.Worker.ClaimBatch = 4 })
	register(t, c, wf)
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			h, err := trellis.Start(ctxT(t), c, wf, i)
			if err != nil {
				errs <- err
				return
			}
			if got, err := h.Result(ctxT(t)); err != nil || got != 2*i {
				t.Errorf("run %d: Result = %d, %v; want %d", i, got, err, 2*i)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// Runs executed by another client's worker (another process) reach the callers
// of a client without a worker: through the store's notifications on Postgres,
// its poll on SQLite.
func TestResultsFromAnotherWorker(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("elsewhere", func(wc *trellis.Context, in int) (int, error) {
		return trellis.Step(wc, "inc", func(context.Context) (int, error) { return in + 1, nil })
	})
	url := storeURL(t)
	starter := open(t, url, func(cfg *trellis.Config) { cfg.Worker.Disabled = true })
	register(t, starter, wf)
	handles := make([]*trellis.Handle[int], 50)
	for i := range handles {
		handles[i] = must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), starter, wf, i))
	}
	var wg sync.WaitGroup
	for i, h := range handles {
		wg.Go(func() {
			if got, err := h.Result(ctxT(t)); err != nil || got != i+1 {
				t.Errorf("run %d: Result = %d, %v; want %d", i, got, err, i+1)
			}
		})
	}
	register(t, open(t, url), wf) // the worker comes up while the callers wait
	wg.Wait()
}

// Wait takes a run ID or a workflow ID, as Get does: by workflow ID it waits for
// the latest run of that workflow ID; a ref that names nothing is ErrRunNotFound.
func TestWaitByWorkflowID(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("by-workflow-id", func(wc *trellis.Context, in int) (int, error) {
		return trellis.Step(wc, "inc", func(context.Context) (int, error) { return in + 1, nil })
	})
	c := open(t, storeURL(t))
	register(t, c, wf)
	h, err := trellis.Start(ctxT(t), c, wf, 41, trellis.StartOptions{ID: "order-41"})
	if err != nil {
		t.Fatal(err)
	}
	run, err := c.Wait(ctxT(t), "order-41")
	if err != nil || run.ID != h.RunID() || run.Status != trellis.StatusSucceeded {
		t.Fatalf("Wait(workflow ID) = %+v, %v; want run %s succeeded", run, err, h.RunID())
	}
	if run, err = c.Wait(ctxT(t), h.RunID()); err != nil || run.ID != h.RunID() {
		t.Fatalf("Wait(run ID) = %+v, %v", run, err)
	}
	if _, err := c.Wait(ctxT(t), "no-such-run"); !errors.Is(err, trellis.ErrRunNotFound) {
		t.Fatalf("Wait(unknown) error = %v, want ErrRunNotFound", err)
	}
}
