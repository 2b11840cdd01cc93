package trellis_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
)

func TestNonDeterminismBlocksUntilResumed(t *testing.T) {
	t.Parallel()
	var deployed atomic.Int32 // which "deploy" of the code is running
	var flaky atomic.Int32
	wf := trellis.NewWorkflow("nondet", func(wc *trellis.Context, _ int) (string, error) {
		name := "charge"
		if deployed.Load() == 1 {
			name = "capture" // a bad deploy renamed the step
		}
		if _, err := trellis.Step(wc, name, func(context.Context) (int, error) { return 1, nil }); err != nil {
			return "", err
		}
		// The bad deploy lands while the run waits to retry this step: its
		// failed attempt deploys it (a poll that had to see the run waiting
		// missed the 50 ms wait on a loaded machine, and the run succeeded).
		if _, err := trellis.Step(wc, "flaky", func(ctx context.Context) (int, error) {
			if flaky.Add(1) == 1 {
				deployed.Store(1)
				return 0, errBoom
			}
			return 1, nil
		}, suspendingRetry); err != nil {
			return "", err
		}
		return "done", nil
	})
	c := setup(t, wf)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, 0))
	run := waitStatus(t, c, h.RunID(), trellis.StatusBlocked)
	if run.Error == nil || !strings.Contains(run.Error.Message, `position 0: history has step "charge", code asked for step "capture"`) {
		t.Fatalf("blocked error %+v", run.Error)
	}
	deployed.Store(0) // the fix is deployed
	if err := c.Resume(ctxT(t), h.RunID()); err != nil {
		t.Fatal(err)
	}
	if got := mustResult(t, h); got != "done" {
		t.Fatalf("result %q", got)
	}
	if err := c.Resume(ctxT(t), h.RunID()); !errors.Is(err, trellis.ErrRunFinished) {
		t.Fatalf("resume of finished run: %v", err)
	}
	// The stream tells the story with lifecycle events alone: run.blocked with
	// the error, and run.resumed for the executions after the wait and after
	// the resumption.
	var names []string
	var blocked string
	for ev, err := range c.Stream(ctxT(t), h.RunID(), 0) {
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(store.StreamLifecycle(), ev.Name) {
			t.Errorf("event %s is not in store.StreamLifecycle", ev.Name)
		}
		if ev.Name == store.StreamRunBlocked {
			blocked = string(ev.Data)
		}
		names = append(names, ev.Name)
	}
	if !strings.Contains(blocked, `code asked for step \"capture\"`) || names[0] != "run.started" ||
		!slices.Contains(names, "run.resumed") || names[len(names)-1] != "run.succeeded" {
		t.Fatalf("stream %v, run.blocked data %s", names, blocked)
	}
}

// The patch is deployed while the run waits to retry its failed step (a
// backoff past MaxInlineBackoff releases the run), so the attempt that follows
// replays the run's start with the patch in place: the history, recorded without
// it, keeps the run on the old branch. (Deploying it inside the failed attempt,
// rather than when a poll sees the run waiting, does not depend on catching the
// 50 ms wait.)
func TestPatchedKeepsOldRunsOnTheOldBranch(t *testing.T) {
	t.Parallel()
	var patched atomic.Bool
	var flaky atomic.Int32
	wf := trellis.NewWorkflow("patch", func(wc *trellis.Context, _ int) (string, error) {
		branch := "old"
		if patched.Load() && wc.Patched("new-step") {
			branch = "new"
			if _, err := trellis.Step(wc, "new", func(context.Context) (int, error) { return 1, nil }); err != nil {
				return "", err
			}
		}
		if _, err := trellis.Step(wc, "a", func(context.Context) (int, error) { return 1, nil }); err != nil {
			return "", err
		}
		if _, err := trellis.Step(wc, "flaky", func(context.Context) (int, error) {
			if flaky.Add(1) == 1 {
				patched.Store(true) // deploy the patch while the run is in flight
				return 0, errBoom
			}
			return 1, nil
		}, suspendingRetry); err != nil {
			return "", err
		}
		return branch, nil
	})
	c := setup(t, wf)
	old := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, 0))
	if got := mustResult(t, old); got != "old" {
		t.Fatalf("in-flight run took branch %q", got)
	}
	if run := must[*trellis.Run](t)(c.Get(ctxT(t), old.RunID())); run.Attempts != 2 {
		t.Fatalf("in-flight run claimed %d times, want 2 (released for its backoff, then replayed)", run.Attempts)
	}
	fresh := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, 0))
	if got := mustResult(t, fresh); got != "new" {
		t.Fatalf("new run took branch %q", got)
	}
}

func TestStepTimeoutFailsAStepThatIgnoresItsContext(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	t.Cleanup(func() { close(hang) })
	wf := trellis.NewWorkflow("timeout", func(wc *trellis.Context, _ int) (string, error) {
		_, err := trellis.Step(wc, "hangs", func(ctx context.Context) (int, error) {
			<-hang // ignores ctx
			return 0, nil
		}, trellis.StepOptions{Timeout: 50 * time.Millisecond, Retry: trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Fixed(time.Millisecond)}})
		if !errors.Is(err, trellis.ErrStepTimeout) {
			return "", errors.New("want ErrStepTimeout")
		}
		return err.Error(), nil
	})
	c := setup(t, wf)
	out := mustResult(t, must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, 0)))
	if !strings.Contains(out, "after 2 attempt(s)") {
		t.Fatalf("result %q", out)
	}
}

func TestDeadlineFailsTheRunAndStopsNewSteps(t *testing.T) {
	t.Parallel()
	var after atomic.Int32
	wf := trellis.NewWorkflow("deadline", func(wc *trellis.Context, _ int) (int, error) {
		trellis.Step(wc, "slow", func(ctx context.Context) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		})
		return trellis.Step(wc, "after", func(context.Context) (int, error) {
			after.Add(1)
			return 1, nil
		})
	})
	c := setup(t, wf)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 0, trellis.StartOptions{Deadline: time.Now().Add(100 * time.Millisecond)}))
	_, err := h.Result(ctxT(t))
	if !errors.Is(err, trellis.ErrDeadlineExceeded) {
		t.Fatalf("err %v", err)
	}
	if after.Load() != 0 {
		t.Fatal("a step started after the deadline")
	}
	if run := must[*trellis.Run](t)(c.Get(ctxT(t), h.RunID())); run.Status != trellis.StatusFailed {
		t.Fatalf("status %s", run.Status)
	}
}

func TestCancelStopsTheStepAndAllowsCleanup(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	var cleaned, after atomic.Int32
	wf := trellis.NewWorkflow("cancel", func(wc *trellis.Context, _ int) (int, error) {
		_, err := trellis.Step(wc, "long", func(ctx context.Context) (int, error) {
			close(started)
			<-ctx.Done()
			return 0, ctx.Err()
		})
		if errors.Is(err, trellis.ErrCancelled) {
			if _, err := trellis.Step(wc, "refused", func(context.Context) (int, error) { after.Add(1); return 0, nil }); !errors.Is(err, trellis.ErrCancelled) {
				return 0, errors.New("a step ran after cancellation")
			}
			trellis.Step(wc.Detached(), "cleanup", func(context.Context) (int, error) { cleaned.Add(1); return 1, nil })
		}
		return 0, err
	})
	c := setup(t, wf)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 0))
	<-started
	if err := c.Cancel(ctxT(t), h.RunID()); err != nil {
		t.Fatal(err)
	}
	_, err := h.Result(ctxT(t))
	var re *trellis.RunError
	if !errors.As(err, &re) || re.Status != trellis.StatusCancelled || !errors.Is(err, trellis.ErrCancelled) {
		t.Fatalf("err %v", err)
	}
	if cleaned.Load() != 1 || after.Load() != 0 {
		t.Fatalf("cleanup ran %d times, refused step %d", cleaned.Load(), after.Load())
	}
	if err := c.Cancel(ctxT(t), h.RunID()); !errors.Is(err, trellis.ErrRunFinished) {
		t.Fatalf("second cancel: %v", err)
	}
}

func TestStartSemantics(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	wf := trellis.NewWorkflow("start", func(wc *trellis.Context, n int) (int, error) {
		return trellis.Step(wc, "wait", func(context.Context) (int, error) { <-gate; return n, nil })
	})
	c := setup(t, wf)
	ctx := ctxT(t)
	h1 := must[*trellis.Handle[int]](t)(trellis.Start(ctx, c, wf, 1, trellis.StartOptions{ID: "order-42"}))
	if h1.ID() != "order-42" || h1.RunID() == "order-42" {
		t.Fatalf("ids %q %q", h1.ID(), h1.RunID())
	}
	if _, err := trellis.Start(ctx, c, wf, 2, trellis.StartOptions{ID: "order-42"}); !errors.Is(err, trellis.ErrRunExists) {
		t.Fatalf("second active start: %v", err)
	}
	h2 := must[*trellis.Handle[int]](t)(trellis.Start(ctx, c, wf, 3, trellis.StartOptions{ID: "order-42", Reuse: trellis.ReuseReturnExisting}))
	if h2.RunID() != h1.RunID() {
		t.Fatalf("return-existing gave %s, want %s", h2.RunID(), h1.RunID())
	}
	close(gate)
	if got := mustResult(t, h1); got != 1 {
		t.Fatalf("result %d", got)
	}
	if _, err := trellis.Start(ctx, c, wf, 4, trellis.StartOptions{ID: "order-42", Reuse: trellis.ReuseReject}); !errors.Is(err, trellis.ErrRunExists) {
		t.Fatalf("reject policy after completion: %v", err)
	}
	h3 := must[*trellis.Handle[int]](t)(trellis.Start(ctx, c, wf, 5, trellis.StartOptions{ID: "order-42"}))
	if got := mustResult(t, h3); got != 5 || h3.RunID() == h1.RunID() {
		t.Fatalf("restart after completion: %d %s", got, h3.RunID())
	}
	latest := must[*trellis.Run](t)(c.Get(ctx, "order-42"))
	if latest.ID != h3.RunID() {
		t.Fatalf("workflow ID resolves to %s, want the latest run %s", latest.ID, h3.RunID())
	}
}

func TestBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	type order struct{ Amount int }
	wf := trellis.NewWorkflow("typed", func(wc *trellis.Context, o order) (int, error) { return o.Amount, nil })
	c := setup(t, wf)
	ctx := ctxT(t)
	if _, err := c.StartRaw(ctx, "typed", []byte(`{"Amount": "many"}`), trellis.StartOptions{}); !errors.Is(err, trellis.ErrInvalidInput) {
		t.Fatalf("undecodable input: %v", err)
	}
	if _, err := c.StartRaw(ctx, "typed", []byte(`{not json`), trellis.StartOptions{}); !errors.Is(err, trellis.ErrInvalidInput) {
		t.Fatalf("malformed input: %v", err)
	}
	huge := []byte(`{"Amount": 1, "pad": "` + strings.Repeat("x", trellis.DefaultMaxPayloadBytes) + `"}`)
	if _, err := c.StartRaw(ctx, "typed", huge, trellis.StartOptions{}); !errors.Is(err, trellis.ErrPayloadTooLarge) {
		t.Fatalf("oversized input: %v", err)
	}
	page := must[*trellis.RunPage](t)(c.List(ctx, trellis.ListOptions{}))
	if len(page.Runs) != 0 {
		t.Fatalf("bad input created %d runs", len(page.Runs))
	}
	run := must[*trellis.Run](t)(c.StartRaw(ctx, "typed", []byte(`{"Amount": 3}`), trellis.StartOptions{}))
	if got := mustResult(t, must[*trellis.Handle[int]](t)(trellis.GetHandle(ctxT(t), c, wf, run.ID))); got != 3 {
		t.Fatalf("raw start result %d", got)
	}
}

func TestListFiltersAndPages(t *testing.T) {
	t.Parallel()
	ok := trellis.NewWorkflow("ok", func(wc *trellis.Context, n int) (int, error) { return n, nil })
	bad := trellis.NewWorkflow("bad", func(wc *trellis.Context, n int) (int, error) { return 0, errBoom })
	c := setup(t, ok, bad)
	ctx := ctxT(t)
	for i := range 7 {
		mustResult(t, must[*trellis.Handle[int]](t)(trellis.Start(ctx, c, ok, i)))
	}
	for range 3 {
		trellis.Start(ctx, c, bad, 0)
	}
	for _, r := range must[*trellis.RunPage](t)(c.List(ctx, trellis.ListOptions{Workflow: "bad"})).Runs {
		c.Wait(ctx, r.ID)
	}
	failed := must[*trellis.RunPage](t)(c.List(ctx, trellis.ListOptions{Statuses: []trellis.Status{trellis.StatusFailed}}))
	if len(failed.Runs) != 3 {
		t.Fatalf("failed runs %d", len(failed.Runs))
	}
	seen := map[string]bool{}
	cursor := ""
	for pages := 0; ; pages++ {
		page := must[*trellis.RunPage](t)(c.List(ctx, trellis.ListOptions{Workflow: "ok", Limit: 3, Cursor: cursor}))
		for _, r := range page.Runs {
			if seen[r.ID] || r.Workflow != "ok" {
				t.Fatalf("run %s seen twice or wrong workflow %s", r.ID, r.Workflow)
			}
			seen[r.ID] = true
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	if len(seen) != 7 {
		t.Fatalf("paged through %d runs, want 7", len(seen))
	}
}

func TestShutdownHandsBackAndAnotherWorkerResumes(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	var first atomic.Int32
	blocked := make(chan struct{})
	block := atomic.Bool{}
	block.Store(true)
	wf := trellis.NewWorkflow("handback", func(wc *trellis.Context, _ int) (string, error) {
		trellis.Step(wc, "first", func(context.Context) (int, error) { first.Add(1); return 1, nil })
		return trellis.Step(wc, "second", func(ctx context.Context) (string, error) {
			if block.Load() {
				close(blocked)
				<-ctx.Done() // the worker is shutting down
				return "", ctx.Err()
			}
			return "finished", nil
		})
	})
	c1, err := trellis.Open(context.Background(), trellis.Config{Store: url, Worker: trellis.WorkerOptions{ShutdownGrace: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	register(t, c1, wf)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c1, wf, 0))
	<-blocked
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	block.Store(false)
	c2 := open(t, url)
	if run := must[*trellis.Run](t)(c2.Get(ctxT(t), h.RunID())); run.Status != trellis.StatusPending {
		t.Fatalf("handed-back run is %s", run.Status)
	}
	register(t, c2, wf)
	if got := mustResult(t, must[*trellis.Handle[string]](t)(trellis.GetHandle(ctxT(t), c2, wf, h.RunID()))); got != "finished" || first.Load() != 1 {
		t.Fatalf("result %q, first step ran %d times", got, first.Load())
	}
}

func TestExpiredLeaseIsTakenOverAndStaleWritesRejected(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	wf := trellis.NewWorkflow("takeover", func(wc *trellis.Context, n int) (int, error) {
		return trellis.Step(wc, "double", func(context.Context) (int, error) { return 2 * n, nil })
	})
	starter := open(t, url, func(c *trellis.Config) { c.Worker.Disabled = true })
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), starter, wf, 21))
	// A worker claims the run and dies without a heartbeat.
	st := openStore(t, url)
	claimed := must[*store.RunsClaimResult](t)(st.RunsClaim(ctxT(t), &store.RunsClaimParams{
		Namespace: "default", Workflows: []string{"takeover"}, Worker: "dead", Max: 1, LeaseDuration: 200 * time.Millisecond}))
	if len(claimed.Runs) != 1 {
		t.Fatal("claim failed")
	}
	c := open(t, url)
	register(t, c, wf)
	if got := mustResult(t, must[*trellis.Handle[int]](t)(trellis.GetHandle(ctxT(t), c, wf, h.RunID()))); got != 42 {
		t.Fatalf("result %d", got)
	}
	_, err := st.Checkpoint(ctxT(t), &store.CheckpointParams{
		Lease: store.Lease{Namespace: "default", RunID: h.RunID(), Token: claimed.Runs[0].LeaseToken}, Status: store.StatusFailed})
	if !errors.Is(err, trellis.ErrLeaseLost) {
		t.Fatalf("stale checkpoint: %v", err)
	}
	if run := must[*trellis.Run](t)(c.Get(ctxT(t), h.RunID())); run.Status != trellis.StatusSucceeded {
		t.Fatalf("stale write changed the run to %s", run.Status)
	}
}

func TestDefaultStoreIsAFileInTheWorkingDirectory(t *testing.T) {
	t.Chdir(t.TempDir())
	c, err := trellis.Open(context.Background(), trellis.Config{Worker: trellis.WorkerOptions{Disabled: true}})
	if err != nil {
		t.Fatalf("open with the default store: %v", err)
	}
	defer c.Close()
	if _, err := os.Stat("trellis.db"); err != nil {
		t.Fatalf("default store file: %v", err)
	}
}

// Heartbeats keep the lease of a run whose step outlasts the lease duration: a
// second worker on the same store never takes it over, and the step runs once.
func TestHeartbeatsKeepALongStepsLease(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	wf := trellis.NewWorkflow("long-step", func(wc *trellis.Context, _ int) (int, error) {
		return trellis.Step(wc, "slow", func(context.Context) (int, error) {
			calls.Add(1)
			time.Sleep(1200 * time.Millisecond) // three lease durations
			return 1, nil
		})
	})
	url := storeURL(t)
	short := func(cfg *trellis.Config) {
		// A heartbeat every 50ms keeps a 400ms lease even when a loaded CI
		// machine delays a few of them.
		cfg.Worker.LeaseDuration = 400 * time.Millisecond
		cfg.Worker.HeartbeatInterval = 50 * time.Millisecond
	}
	c := open(t, url, short)
	register(t, c, wf)
	register(t, open(t, url, short), wf) // a second worker, ready to take over
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 0))
	mustResult(t, h)
	if run := must[*trellis.Run](t)(c.Get(ctxT(t), h.RunID())); run.Attempts != 1 || calls.Load() != 1 {
		t.Fatalf("attempts %d, step calls %d; want one claim and one execution", run.Attempts, calls.Load())
	}
}
