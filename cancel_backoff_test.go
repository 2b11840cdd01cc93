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

// A cancellation during a retry backoff that waits in the worker ends the backoff
// and the run, and no further attempt runs: from the process running the run (the
// backoff ends at once) and from another process (learnt by the checkpoint that
// precedes the next attempt).
func TestCancelDuringInlineBackoffRunsNoFurtherAttempt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		backoff time.Duration
		remote  bool
	}{
		{"same process", time.Minute, false},
		{"other process", 300 * time.Millisecond, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var attempts atomic.Int32
			failed := make(chan struct{}, 1)
			wf := trellis.NewWorkflow("backoff-cancel", func(wc *trellis.Context, _ int) (int, error) {
				return trellis.Step(wc, "flaky", func(context.Context) (int, error) {
					attempts.Add(1)
					failed <- struct{}{}
					return 0, errBoom
				}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 5, Backoff: trellis.Fixed(tc.backoff)}})
			})
			url := storeURL(t)
			c := open(t, url, func(cfg *trellis.Config) { cfg.Worker.MaxInlineBackoff = 2 * time.Minute })
			register(t, c, wf)
			canceller := c
			if tc.remote {
				canceller = open(t, url, func(cfg *trellis.Config) { cfg.Worker.Disabled = true })
			}
			h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 0))
			<-failed
			if err := canceller.Cancel(ctxT(t), h.RunID()); err != nil {
				t.Fatal(err)
			}
			_, err := h.Result(ctxT(t))
			if !errors.Is(err, trellis.ErrCancelled) {
				t.Fatalf("result: %v, want ErrCancelled", err)
			}
			if n := attempts.Load(); n != 1 {
				t.Fatalf("%d attempts ran, want 1", n)
			}
		})
	}
}

// A workflow that returns an error wrapping ErrCancelled (another run's, a
// step's) without its own cancellation asked for fails: only a requested
// cancellation ends a run cancelled (the protocol's rule, which the server
// holds remote workers to).
func TestErrCancelledWithoutRequestFails(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("wraps-cancelled", func(wc *trellis.Context, _ int) (int, error) {
		return trellis.Step(wc, "other", func(context.Context) (int, error) {
			return 0, trellis.NonRetryable(fmt.Errorf("the order's run: %w", trellis.ErrCancelled))
		})
	})
	c := open(t, storeURL(t))
	register(t, c, wf)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 0))
	if _, err := h.Result(ctxT(t)); err == nil {
		t.Fatal("the run succeeded")
	}
	run, err := c.Get(ctxT(t), h.RunID())
	if err != nil || run.Status != trellis.StatusFailed {
		t.Fatalf("run %v (%v), want failed", run, err)
	}
}
