package trellis_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

func TestJobRunsOnceAndRecordsNoHistory(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	j := trellis.NewJob("double", func(ctx context.Context, n int) (int, error) {
		calls.Add(1)
		if info := trellis.StepInfo(ctx); info.Attempt != 1 || info.Step != "double" {
			return 0, errors.New("wrong attempt info")
		}
		return 2 * n, nil
	})
	c := setup(t, j)
	h := must[*trellis.Handle[int]](t)(trellis.StartJob(ctxT(t), c, j, 21))
	if got := mustResult(t, h); got != 42 {
		t.Fatalf("result %d, want 42", got)
	}
	if calls.Load() != 1 {
		t.Fatalf("job called %d times, want 1", calls.Load())
	}
	hist := must[[]*trellis.Op](t)(c.History(ctxT(t), h.RunID()))
	if len(hist) != 0 {
		t.Fatalf("a job that succeeds at once records no op; got %+v", hist)
	}
	run := must[*trellis.Run](t)(c.Get(ctxT(t), h.RunID()))
	if run.Status != trellis.StatusSucceeded || run.Workflow != "double" || run.Attempts != 1 {
		t.Fatalf("run %+v", run)
	}
}

func TestJobRetriesThenSucceeds(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	j := trellis.NewJob("flaky-job", func(ctx context.Context, _ string) (string, error) {
		if n := calls.Add(1); n < 3 {
			return "", errBoom
		}
		return "ok", nil
	}, trellis.JobOptions{Retry: trellis.RetryPolicy{MaxAttempts: 3, Backoff: trellis.Fixed(10 * time.Millisecond)}})
	c := setup(t, j)
	h := must[*trellis.Handle[string]](t)(trellis.StartJob(ctxT(t), c, j, "x"))
	if got := mustResult(t, h); got != "ok" {
		t.Fatalf("result %q", got)
	}
	hist := must[[]*trellis.Op](t)(c.History(ctxT(t), h.RunID()))
	if len(hist) != 1 || !hist[0].Done || hist[0].Attempts != 3 || len(hist[0].AttemptLog) != 2 {
		t.Fatalf("history %+v", hist)
	}
	// (A millisecond of slack: Postgres keeps times to the microsecond.)
	if a := hist[0].AttemptStartedAt; a == nil || a.Before(hist[0].AttemptLog[1].FinishedAt.Add(9*time.Millisecond)) || a.After(*hist[0].FinishedAt) {
		t.Fatalf("AttemptStartedAt = %v, want after the second failure and its 10ms backoff (%v), before the end %v",
			a, hist[0].AttemptLog[1].FinishedAt, hist[0].FinishedAt)
	}
}

func TestJobFailsAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	j := trellis.NewJob("always-fails", func(ctx context.Context, _ int) (int, error) {
		calls.Add(1)
		return 0, errBoom
	}, trellis.JobOptions{Retry: trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Fixed(5 * time.Millisecond)}})
	c := setup(t, j)
	h := must[*trellis.Handle[int]](t)(trellis.StartJob(ctxT(t), c, j, 1))
	_, err := h.Result(ctxT(t))
	var re *trellis.RunError
	if !errors.As(err, &re) || re.Status != trellis.StatusFailed || re.Message != "boom" {
		t.Fatalf("result error %v", err)
	}
	if calls.Load() != 2 {
		t.Fatalf("called %d times, want 2", calls.Load())
	}
}

func TestJobNonRetryableFailsAtOnce(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	j := trellis.NewJob("nonretry", func(ctx context.Context, _ int) (int, error) {
		calls.Add(1)
		return 0, trellis.NonRetryable(errBoom)
	})
	c := setup(t, j)
	h := must[*trellis.Handle[int]](t)(trellis.StartJob(ctxT(t), c, j, 1))
	if _, err := h.Result(ctxT(t)); err == nil {
		t.Fatal("want an error")
	}
	if calls.Load() != 1 {
		t.Fatalf("called %d times, want 1", calls.Load())
	}
}

func TestJobCancelled(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	j := trellis.NewJob("blocker", func(ctx context.Context, _ int) (int, error) {
		close(started)
		<-ctx.Done()
		return 0, ctx.Err()
	})
	c := setup(t, j)
	h := must[*trellis.Handle[int]](t)(trellis.StartJob(ctxT(t), c, j, 1))
	<-started
	if err := c.Cancel(ctxT(t), h.RunID()); err != nil {
		t.Fatal(err)
	}
	_, err := h.Result(ctxT(t))
	var re *trellis.RunError
	if !errors.As(err, &re) || re.Status != trellis.StatusCancelled {
		t.Fatalf("result error %v", err)
	}
	// The function returned its context's error, which adds nothing to the
	// cause (it read "run cancelled: context canceled").
	if re.Message != "run cancelled" {
		t.Fatalf("cancelled job's error %q, want %q", re.Message, "run cancelled")
	}
}

func TestJobBadInputFailsWithoutRetry(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	j := trellis.NewJob("typed", func(ctx context.Context, n int) (int, error) {
		calls.Add(1)
		return n, nil
	})
	url := storeURL(t)
	c := open(t, url)
	register(t, c, j)
	// Started by name from a process that does not know the job: not checked.
	other := open(t, url, func(cfg *trellis.Config) { cfg.Worker.Disabled = true })
	run := must[*trellis.Run](t)(other.StartRaw(ctxT(t), "typed", []byte(`"not a number"`), trellis.StartOptions{}))
	got := must[*trellis.Run](t)(c.Wait(ctxT(t), run.ID))
	if got.Status != trellis.StatusFailed || calls.Load() != 0 {
		t.Fatalf("run %+v, calls %d", got, calls.Load())
	}
}

// StartMany creates the runs for which the client's idle worker has a free
// slot already claimed by it, as Start does (no claim of their own: they come
// back running); the rest wait pending for a claim. All of them run.
func TestStartManyCreatesClaimed(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	j := trellis.NewJob("gated", func(ctx context.Context, n int) (int, error) {
		select {
		case <-gate:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
		return n, nil
	})
	c := open(t, storeURL(t), func(cfg *trellis.Config) { cfg.Worker.Concurrency = 2 })
	register(t, c, j)
	reqs := make([]trellis.StartRequest, 4)
	for i := range reqs {
		reqs[i] = trellis.StartRequest{Workflow: "gated", Input: []byte(fmt.Sprint(i))}
	}
	res := must[[]trellis.StartResult](t)(c.StartMany(ctxT(t), reqs))
	for i, r := range res {
		want := trellis.StatusPending
		if i < 2 {
			want = trellis.StatusRunning
		}
		if !r.Created || r.Run.Status != want {
			t.Fatalf("item %d: created %v, status %s; want created, %s", i, r.Created, r.Run.Status, want)
		}
	}
	close(gate)
	for i, r := range res {
		got := must[*trellis.Run](t)(c.Wait(ctxT(t), r.Run.ID))
		if got.Status != trellis.StatusSucceeded || string(got.Output) != fmt.Sprint(i) || got.Attempts != 1 {
			t.Fatalf("run %d: %s, output %s, attempts %d", i, got.Status, got.Output, got.Attempts)
		}
	}
}

func TestStartManyJobs(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	j := trellis.NewJob("count", func(ctx context.Context, n int) (int, error) {
		calls.Add(1)
		return n + 1, nil
	})
	c := setup(t, j)
	reqs := make([]trellis.StartRequest, 300)
	for i := range reqs {
		reqs[i] = trellis.StartRequest{Workflow: "count", Input: []byte(fmt.Sprint(i))}
	}
	reqs[299].Options.ID = "dup"
	reqs[298].Options.ID = "dup"
	res := must[[]trellis.StartResult](t)(c.StartMany(ctxT(t), reqs))
	if len(res) != 300 || !res[298].Created || res[299].Created || !errors.Is(res[299].Error, trellis.ErrRunExists) {
		t.Fatalf("results: %d, 298 %+v, 299 %+v", len(res), res[298], res[299])
	}
	for i, r := range res[:299] {
		got := must[*trellis.Run](t)(c.Wait(ctxT(t), r.Run.ID))
		if got.Status != trellis.StatusSucceeded || string(got.Output) != fmt.Sprint(i+1) {
			t.Fatalf("run %d: %+v", i, got)
		}
	}
	if calls.Load() != 299 {
		t.Fatalf("%d calls, want 299", calls.Load())
	}
	// Bad input fails the whole batch and starts nothing.
	bad := []trellis.StartRequest{{Workflow: "count", Input: []byte("1")}, {Workflow: "count", Input: []byte(`"x"`)}}
	if _, err := c.StartMany(ctxT(t), bad); !errors.Is(err, trellis.ErrInvalidInput) {
		t.Fatalf("StartMany with a bad input = %v, want ErrInvalidInput", err)
	}
	if _, err := c.StartMany(ctxT(t), nil); !errors.Is(err, trellis.ErrInvalidParams) {
		t.Fatalf("StartMany of nothing = %v, want ErrInvalidParams", err)
	}
	page := must[*trellis.RunPage](t)(c.List(ctxT(t), trellis.ListOptions{Limit: 1000}))
	if len(page.Runs) != 299 {
		t.Fatalf("%d runs stored, want 299", len(page.Runs))
	}
}

func TestDeleteRun(t *testing.T) {
	t.Parallel()
	j := trellis.NewJob("quick", func(ctx context.Context, n int) (int, error) { return n, nil })
	block := make(chan struct{})
	slow := trellis.NewJob("slow", func(ctx context.Context, n int) (int, error) {
		<-block
		return n, nil
	})
	c := setup(t, j, slow)
	defer close(block)
	h := must[*trellis.Handle[int]](t)(trellis.StartJob(ctxT(t), c, j, 1))
	mustResult(t, h)
	running := must[*trellis.Handle[int]](t)(trellis.StartJob(ctxT(t), c, slow, 1))
	if err := c.Delete(ctxT(t), running.RunID()); !errors.Is(err, trellis.ErrRunActive) {
		t.Fatalf("Delete of an active run = %v, want ErrRunActive", err)
	}
	if err := c.Delete(ctxT(t), h.RunID()); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctxT(t), h.RunID()); !errors.Is(err, trellis.ErrRunNotFound) {
		t.Fatalf("Get after Delete = %v, want ErrRunNotFound", err)
	}
	if err := c.Delete(ctxT(t), h.RunID()); !errors.Is(err, trellis.ErrRunNotFound) {
		t.Fatalf("second Delete = %v, want ErrRunNotFound", err)
	}
}

// A job cancelled while it waits for a retry's backoff ends cancelled without
// another attempt.
func TestJobCancelledInBackoff(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	j := trellis.NewJob("backoff-cancel", func(ctx context.Context, _ int) (int, error) {
		calls.Add(1)
		return 0, errBoom
	}, trellis.JobOptions{Retry: trellis.RetryPolicy{MaxAttempts: 3, Backoff: trellis.Fixed(time.Hour)}})
	c := setup(t, j)
	h := must[*trellis.Handle[int]](t)(trellis.StartJob(ctxT(t), c, j, 1))
	for {
		run := must[*trellis.Run](t)(c.Get(ctxT(t), h.RunID()))
		if run.Status == trellis.StatusWaiting {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := c.Cancel(ctxT(t), h.RunID()); err != nil {
		t.Fatal(err)
	}
	run := must[*trellis.Run](t)(c.Wait(ctxT(t), h.RunID()))
	if run.Status != trellis.StatusCancelled || calls.Load() != 1 {
		t.Fatalf("run %s after %d calls, want cancelled after 1", run.Status, calls.Load())
	}
}
