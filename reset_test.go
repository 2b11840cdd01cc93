package trellis_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/trellis-dev/trellis"
)

// TestResetRunsAgainFromAStep fails a run at its second step, "fixes" the step, and
// resets the run to it: the new run replays the first step and the run-store write
// before the failed step, executes the failed step and the rest, and succeeds; the
// old run stays failed.
func TestResetRunsAgainFromAStep(t *testing.T) {
	t.Parallel()
	var first, second atomic.Int32
	var fixed atomic.Bool
	wf := trellis.NewWorkflow("resettable", func(wc *trellis.Context, n int) (int, error) {
		a, err := trellis.Step(wc, "first", func(context.Context) (int, error) { first.Add(1); return n, nil })
		if err != nil {
			return 0, err
		}
		if err := wc.Set("seen", a); err != nil {
			return 0, err
		}
		b, err := trellis.Step(wc, "second", func(context.Context) (int, error) {
			second.Add(1)
			if !fixed.Load() {
				return 0, trellis.NonRetryable(errBoom)
			}
			return 10, nil
		})
		if err != nil {
			return 0, err
		}
		var seen int
		if _, err := wc.Get("seen", &seen); err != nil {
			return 0, err
		}
		return seen + b, nil
	})
	c := setup(t, wf)
	ctx := ctxT(t)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctx, c, wf, 5, trellis.StartOptions{ID: "order-1"}))
	if _, err := h.Result(ctx); err == nil {
		t.Fatalf("first run: err %v, want a failure", err)
	}
	fixed.Store(true)
	run, err := c.Reset(ctx, "order-1", "second")
	if err != nil {
		t.Fatalf("Reset: %v", err)
	}
	if run.ID == h.RunID() || run.WorkflowID != "order-1" || run.Status != trellis.StatusPending {
		t.Fatalf("reset run = %+v, want a new pending run of order-1", run)
	}
	got := must[*trellis.Run](t)(c.Wait(ctx, run.ID))
	if got.Status != trellis.StatusSucceeded || string(got.Output) != "15" {
		t.Fatalf("reset run ended %s with %s (%+v), want succeeded with 15", got.Status, got.Output, got.Error)
	}
	if first.Load() != 1 || second.Load() != 2 {
		t.Fatalf("first ran %d times, second %d; want 1 and 2", first.Load(), second.Load())
	}
	if old := must[*trellis.Run](t)(c.Get(ctx, h.RunID())); old.Status != trellis.StatusFailed {
		t.Fatalf("old run is %s, want failed", old.Status)
	}
	if latest := must[*trellis.Run](t)(c.Get(ctx, "order-1")); latest.ID != run.ID {
		t.Fatalf("workflow ID order-1 names run %s, want the reset run %s", latest.ID, run.ID)
	}
	var seen int
	if err := c.Value(ctx, run.ID, "seen", &seen); err != nil || seen != 5 {
		t.Fatalf("reset run's value seen = %d, %v; want 5", seen, err)
	}
}

// TestResetBadInput: unknown run, unknown step and an active run are refused and
// start nothing; a reset past a Map keeps the Map's recorded results and starts no
// child again.
func TestResetBadInput(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	item := trellis.NewWorkflow("reset-item", func(wc *trellis.Context, n int) (int, error) { return n, nil })
	wf := trellis.NewWorkflow("reset-bad", func(wc *trellis.Context, mode string) (int, error) {
		if mode == "map" {
			if _, err := trellis.Map(wc, item, []int{1, 2}); err != nil {
				return 0, err
			}
		}
		return trellis.Step(wc, "s", func(ctx context.Context) (int, error) {
			if mode == "block" {
				select {
				case <-release:
				case <-ctx.Done():
				}
			}
			return 1, nil
		})
	})
	c := setup(t, wf, item)
	ctx := ctxT(t)
	_, err := c.Reset(ctx, "nope", "s")
	if !errors.Is(err, trellis.ErrRunNotFound) {
		t.Fatalf("Reset of an unknown run: %v, want ErrRunNotFound", err)
	}
	hm := must[*trellis.Handle[int]](t)(trellis.Start(ctx, c, wf, "map"))
	mustResult(t, hm)
	if _, err := c.Reset(ctx, hm.RunID(), "nope"); !errors.Is(err, trellis.ErrInvalidParams) {
		t.Fatalf("Reset to an unknown step: %v, want ErrInvalidParams", err)
	}
	hb := must[*trellis.Handle[int]](t)(trellis.Start(ctx, c, wf, "block"))
	waitStatus(t, c, hb.RunID(), trellis.StatusRunning)
	if _, err := c.Reset(ctx, hb.RunID(), "s"); !errors.Is(err, trellis.ErrRunActive) {
		t.Fatalf("Reset of a running run: %v, want ErrRunActive", err)
	}
	close(release)
	mustResult(t, hb)
	page := must[*trellis.RunPage](t)(c.List(ctx, trellis.ListOptions{Workflow: "reset-bad"}))
	if len(page.Runs) != 2 {
		t.Fatalf("%d runs of reset-bad, want the 2 started (no reset run)", len(page.Runs))
	}
	// Past the Map: its op holds the items' results; no child runs again.
	past, err := c.Reset(ctx, hm.RunID(), "s")
	if err != nil {
		t.Fatalf("Reset past a Map: %v", err)
	}
	if got := must[*trellis.Run](t)(c.Wait(ctx, past.ID)); got.Status != trellis.StatusSucceeded {
		t.Fatalf("reset past a Map ended %s (%+v)", got.Status, got.Error)
	}
	if items := must[*trellis.RunPage](t)(c.List(ctx, trellis.ListOptions{Workflow: "reset-item"})); len(items.Runs) != 2 {
		t.Fatalf("%d item runs after the reset, want the Map's 2", len(items.Runs))
	}
	// From the start: an empty step reruns with the same input.
	run, err := c.Reset(ctx, hm.RunID(), "")
	if err != nil {
		t.Fatalf("Reset from the start: %v", err)
	}
	if got := must[*trellis.Run](t)(c.Wait(ctx, run.ID)); got.Status != trellis.StatusSucceeded {
		t.Fatalf("rerun ended %s", got.Status)
	}
}
