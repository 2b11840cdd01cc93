package trellis_test

import (
	"context"
	"errors"
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
