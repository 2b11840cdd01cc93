package trellis_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// StepOptions.TotalTimeout bounds a step across its attempts and backoffs: a
// step that keeps failing, and a step whose one attempt runs too long, fail with
// ErrStepTotalTimeout (also an ErrStepTimeout) and are not retried after it.
func TestStepTotalTimeout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		fn   func(ctx context.Context) (int, error)
	}{
		{"failing attempts", func(context.Context) (int, error) { return 0, errBoom }},
		{"one long attempt", func(ctx context.Context) (int, error) { <-ctx.Done(); return 0, ctx.Err() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var attempts atomic.Int32
			wf := trellis.NewWorkflow("total-timeout", func(wc *trellis.Context, _ int) (string, error) {
				_, err := trellis.Step(wc, "slow", func(ctx context.Context) (int, error) {
					attempts.Add(1)
					return tc.fn(ctx)
				}, trellis.StepOptions{TotalTimeout: 200 * time.Millisecond,
					Retry: trellis.RetryPolicy{MaxAttempts: 10000, Backoff: trellis.Fixed(10 * time.Millisecond)}})
				var se *trellis.StepError
				if !errors.As(err, &se) || !errors.Is(err, trellis.ErrStepTotalTimeout) || !errors.Is(err, trellis.ErrStepTimeout) {
					return "", errors.New("want a StepError that is ErrStepTotalTimeout")
				}
				return se.Type, nil
			})
			c := setup(t, wf)
			h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, 0))
			if got := mustResult(t, h); got != "step_total_timeout" {
				t.Fatalf("type %q", got)
			}
			if n := attempts.Load(); n == 10000 {
				t.Fatal("every attempt ran")
			}
		})
	}
}
