package trellis_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// flaky fails its first n calls with a short backoff that suspends the run, which
// forces a full replay of everything before it.
func suspendOnce(calls *atomic.Int32) func(context.Context) (int, error) {
	return func(context.Context) (int, error) {
		if calls.Add(1) == 1 {
			return 0, errBoom
		}
		return 1, nil
	}
}

var suspendingRetry = trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 3, Backoff: trellis.Fixed(50 * time.Millisecond)}}

func TestStepsAreMemoizedAcrossReplay(t *testing.T) {
	t.Parallel()
	var first, flaky atomic.Int32
	wf := trellis.NewWorkflow("memo", func(wc *trellis.Context, n int) (string, error) {
		a, err := trellis.Step(wc, "first", func(ctx context.Context) (int, error) {
			first.Add(1)
			return n * 2, nil
		})
		if err != nil {
			return "", err
		}
		if _, err := trellis.Step(wc, "flaky", suspendOnce(&flaky), suspendingRetry); err != nil {
			return "", err
		}
		return fmt.Sprintf("got %d", a), nil
	})
	c := setup(t, wf)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, 21))
	if got := mustResult(t, h); got != "got 42" {
		t.Fatalf("result %q", got)
	}
	if first.Load() != 1 {
		t.Fatalf("first step ran %d times across a replay, want 1", first.Load())
	}
	hist := must[[]*trellis.Op](t)(c.History(ctxT(t), h.RunID()))
	if len(hist) != 2 || hist[0].Name != "first" || string(hist[0].Result) != "42" {
		t.Fatalf("history %+v", hist)
	}
	if hist[1].Attempts != 2 || len(hist[1].AttemptLog) != 1 || hist[1].AttemptLog[0].Error.Message != "boom" {
		t.Fatalf("flaky step attempts %d log %+v", hist[1].Attempts, hist[1].AttemptLog)
	}
	// Its second attempt ran in a later execution of the run.
	if a := hist[1].AttemptStartedAt; a == nil || a.Before(hist[1].AttemptLog[0].FinishedAt) || hist[0].AttemptStartedAt != nil {
		t.Fatalf("AttemptStartedAt: flaky %v (failed attempt ended %v), first %v", a, hist[1].AttemptLog[0].FinishedAt, hist[0].AttemptStartedAt)
	}
	run := must[*trellis.Run](t)(c.Get(ctxT(t), h.RunID()))
	if run.Attempts < 2 {
		t.Fatalf("run claimed %d times, want a replay after the suspension", run.Attempts)
	}
}

func TestDeterministicHelpersReplayTheSameValues(t *testing.T) {
	t.Parallel()
	var flaky atomic.Int32
	var mu sync.Mutex
	var seen []string
	wf := trellis.NewWorkflow("helpers", func(wc *trellis.Context, _ struct{}) (string, error) {
		v := fmt.Sprintf("%s|%d|%d|%d", wc.UUID(), wc.Random(), wc.Now().UnixNano(), wc.Version())
		mu.Lock()
		seen = append(seen, v)
		mu.Unlock()
		if _, err := trellis.Step(wc, "flaky", suspendOnce(&flaky), suspendingRetry); err != nil {
			return "", err
		}
		return v, nil
	}, trellis.WorkflowOptions{Version: 7})
	c := setup(t, wf)
	out := mustResult(t, must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, struct{}{})))
	mu.Lock()
	defer mu.Unlock()
	if len(seen) < 2 {
		t.Fatalf("workflow ran %d times, want a replay", len(seen))
	}
	for _, v := range seen {
		if v != out {
			t.Fatalf("replay saw %q, first run %q", v, out)
		}
	}
	if !strings.HasSuffix(out, "|7") {
		t.Fatalf("version not pinned: %q", out)
	}
}

func TestAsyncStepsResolveByPosition(t *testing.T) {
	t.Parallel()
	var flaky, runs atomic.Int32
	wf := trellis.NewWorkflow("async", func(wc *trellis.Context, _ int) ([]string, error) {
		release := make(chan struct{})
		slow := trellis.Async(wc, "slow", func(ctx context.Context) (string, error) {
			runs.Add(1)
			<-release // finishes after fast
			return "slow", nil
		})
		fast := trellis.Async(wc, "fast", func(ctx context.Context) (string, error) {
			runs.Add(1)
			defer close(release)
			return "fast", nil
		})
		b, err := fast.Get(wc)
		if err != nil {
			return nil, err
		}
		a, err := slow.Get(wc)
		if err != nil {
			return nil, err
		}
		if _, err := trellis.Step(wc, "flaky", suspendOnce(&flaky), suspendingRetry); err != nil {
			return nil, err
		}
		return []string{a, b}, nil
	})
	c := setup(t, wf)
	h := must[*trellis.Handle[[]string]](t)(trellis.Start(ctxT(t), c, wf, 0))
	got := mustResult(t, h)
	if len(got) != 2 || got[0] != "slow" || got[1] != "fast" {
		t.Fatalf("result %v", got)
	}
	if runs.Load() != 2 {
		t.Fatalf("async steps ran %d times across a replay, want 2", runs.Load())
	}
	hist := must[[]*trellis.Op](t)(c.History(ctxT(t), h.RunID()))
	if hist[0].Name != "slow" || hist[1].Name != "fast" {
		t.Fatalf("positions not reserved at call time: %s, %s", hist[0].Name, hist[1].Name)
	}
}

func TestRunStoreIsSavedWithCheckpoints(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("kv", func(wc *trellis.Context, _ int) (int, error) {
		if err := wc.Set("auth", map[string]int{"amount": 5}); err != nil {
			return 0, err
		}
		if err := wc.Set("tmp", 1); err != nil {
			return 0, err
		}
		wc.Delete("tmp")
		var got map[string]int
		ok, err := wc.Get("auth", &got)
		if !ok || err != nil {
			return 0, fmt.Errorf("get: %v %v", ok, err)
		}
		if ok, _ := wc.Get("tmp", new(int)); ok {
			return 0, errors.New("deleted key still visible")
		}
		return got["amount"], nil
	})
	c := setup(t, wf)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 0))
	if got := mustResult(t, h); got != 5 {
		t.Fatalf("result %d", got)
	}
	var v map[string]int
	if err := c.Value(ctxT(t), h.RunID(), "auth", &v); err != nil || v["amount"] != 5 {
		t.Fatalf("client value %v %v", v, err)
	}
	if err := c.Value(ctxT(t), h.RunID(), "tmp", new(int)); !errors.Is(err, trellis.ErrKeyNotFound) {
		t.Fatalf("deleted key: %v", err)
	}
	big := strings.Repeat("x", trellis.DefaultMaxPayloadBytes)
	wf2 := trellis.NewWorkflow("kv-big", func(wc *trellis.Context, _ int) (string, error) {
		err := wc.Set("big", big)
		return fmt.Sprint(errors.Is(err, trellis.ErrPayloadTooLarge)), nil
	})
	register(t, c, wf2)
	if got := mustResult(t, must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf2, 0))); got != "true" {
		t.Fatalf("oversized Set: ErrPayloadTooLarge = %s", got)
	}
}

func TestRetriesRecordEveryAttempt(t *testing.T) {
	t.Parallel()
	var calls, permanent atomic.Int32
	wf := trellis.NewWorkflow("retries", func(wc *trellis.Context, _ int) (string, error) {
		v, err := trellis.Step(wc, "twice-failing", func(ctx context.Context) (string, error) {
			if calls.Add(1) <= 2 {
				return "", fmt.Errorf("attempt %d failed", calls.Load())
			}
			return "ok", nil
		}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 5, Backoff: trellis.Exponential(time.Millisecond, 2, 5*time.Millisecond)}})
		if err != nil {
			return "", err
		}
		_, err = trellis.Step(wc, "permanent", func(ctx context.Context) (int, error) {
			permanent.Add(1)
			return 0, trellis.NonRetryable(errBoom)
		})
		var se *trellis.StepError
		if !errors.As(err, &se) || se.Attempts != 1 {
			return "", fmt.Errorf("want a StepError after 1 attempt, got %v", err)
		}
		_, err = trellis.Step(wc, "exhausted", func(ctx context.Context) (int, error) {
			return 0, errBoom
		}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Fixed(time.Millisecond)}})
		if err == nil {
			return "", errors.New("exhausted step succeeded")
		}
		return v + " handled: " + err.Error(), nil // the workflow handles the error
	})
	c := setup(t, wf)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, 0))
	out := mustResult(t, h)
	if !strings.Contains(out, `step "exhausted" failed after 2 attempt(s): boom`) {
		t.Fatalf("result %q", out)
	}
	hist := must[[]*trellis.Op](t)(c.History(ctxT(t), h.RunID()))
	if hist[0].Attempts != 3 || len(hist[0].AttemptLog) != 2 || hist[0].AttemptLog[1].Error.Message != "attempt 2 failed" {
		t.Fatalf("retried step: %+v", hist[0])
	}
	// The attempt that succeeded has its own start, after the failed ones' (a
	// timeline draws it without the backoff before it).
	if a := hist[0].AttemptStartedAt; a == nil || a.Before(hist[0].AttemptLog[1].FinishedAt) || a.After(*hist[0].FinishedAt) {
		t.Fatalf("retried step's AttemptStartedAt = %v, want between %v and %v", a, hist[0].AttemptLog[1].FinishedAt, hist[0].FinishedAt)
	}
	if hist[1].AttemptStartedAt != nil || hist[2].AttemptStartedAt != nil {
		t.Fatalf("failed steps have AttemptStartedAt: %v, %v", hist[1].AttemptStartedAt, hist[2].AttemptStartedAt)
	}
	if permanent.Load() != 1 || hist[1].Error == nil || !hist[1].Error.NonRetryable {
		t.Fatalf("non-retryable step ran %d times: %+v", permanent.Load(), hist[1])
	}
	if len(hist[2].AttemptLog) != 2 || hist[2].Error == nil {
		t.Fatalf("exhausted step: %+v", hist[2])
	}
}

func TestWorkflowErrorFailsRun(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("fails", func(wc *trellis.Context, _ int) (int, error) {
		return 0, fmt.Errorf("cannot ship: %w", errBoom)
	})
	panics := trellis.NewWorkflow("panics", func(wc *trellis.Context, _ int) (int, error) {
		panic("kaboom")
	})
	c := setup(t, wf, panics)
	_, err := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 0)).Result(ctxT(t))
	var re *trellis.RunError
	if !errors.As(err, &re) || re.Status != trellis.StatusFailed || re.Message != "cannot ship: boom" {
		t.Fatalf("err %v", err)
	}
	_, err = must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, panics, 0)).Result(ctxT(t))
	if !errors.As(err, &re) || re.Status != trellis.StatusFailed || !strings.Contains(re.Message, "kaboom") {
		t.Fatalf("panic err %v", err)
	}
}

func TestLongBackoffReleasesTheRun(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	release := make(chan struct{})
	wf := trellis.NewWorkflow("backoff", func(wc *trellis.Context, _ int) (int, error) {
		return trellis.Step(wc, "later", func(ctx context.Context) (int, error) {
			if calls.Add(1) == 1 {
				return 0, errBoom
			}
			<-release
			return 9, nil
		}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Fixed(300 * time.Millisecond)}})
	})
	c := setup(t, wf)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 0))
	run := waitStatus(t, c, h.RunID(), trellis.StatusWaiting)
	if !strings.Contains(run.WaitReason, `retry backoff: step "later" attempt 2`) {
		t.Fatalf("wait reason %q", run.WaitReason)
	}
	close(release)
	if got := mustResult(t, h); got != 9 {
		t.Fatalf("result %d", got)
	}
}

func TestHistoryOpsCarryKinds(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("kinds", func(wc *trellis.Context, _ int) (bool, error) {
		wc.Now()
		wc.UUID()
		wc.Random()
		return wc.Patched("p1"), nil
	})
	c := setup(t, wf)
	h := must[*trellis.Handle[bool]](t)(trellis.Start(ctxT(t), c, wf, 0))
	if !mustResult(t, h) {
		t.Fatal("new run did not take the patched branch")
	}
	hist := must[[]*trellis.Op](t)(c.History(ctxT(t), h.RunID()))
	want := []trellis.OpKind{trellis.OpNow, trellis.OpUUID, trellis.OpRandom, trellis.OpPatch}
	if len(hist) != len(want) {
		t.Fatalf("history %d ops", len(hist))
	}
	for i, k := range want {
		if hist[i].Kind != k || hist[i].Position != i {
			t.Fatalf("op %d: %s at %d, want %s", i, hist[i].Kind, hist[i].Position, k)
		}
	}
}
