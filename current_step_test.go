package trellis_test

import (
	"context"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// The step a run executes now reaches its record with the lease heartbeat, not
// with a write of its own: name and attempt (a retried step reports its second
// attempt), for workflow steps and for jobs; none once the run has ended.
func TestCurrentStepFromHeartbeat(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	wf := trellis.NewWorkflow("current-step", func(wc *trellis.Context, _ int) (int, error) {
		return trellis.Step(wc, "charge", func(ctx context.Context) (int, error) {
			if trellis.StepInfo(ctx).Attempt == 1 {
				return 0, errBoom
			}
			select {
			case <-release:
				return 7, nil
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 3, Backoff: trellis.Fixed(time.Millisecond)}})
	})
	job := trellis.NewJob("current-job", func(ctx context.Context, _ int) (int, error) {
		select {
		case <-release:
			return 1, nil
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	})
	c := open(t, storeURL(t), func(cfg *trellis.Config) {
		cfg.Worker.LeaseDuration = 3 * time.Second
		cfg.Worker.HeartbeatInterval = 50 * time.Millisecond
	})
	register(t, c, wf, job)
	ctx := ctxT(t)
	before := time.Now()
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctx, c, wf, 0))
	hj := must[*trellis.Handle[int]](t)(trellis.StartJob(ctx, c, job, 0))

	waitStep := func(id, name string, attempt int) {
		t.Helper()
		for {
			r, err := c.Get(ctx, id)
			if err != nil {
				t.Fatalf("Get: %v", err)
			}
			if s := r.CurrentStep; s != nil && s.Name == name && s.Attempt == attempt {
				if s.Since.Before(before.Add(-time.Second)) || s.Since.After(time.Now()) {
					t.Fatalf("CurrentStep.Since = %v, want within the test", s.Since)
				}
				return
			}
			if ctx.Err() != nil {
				t.Fatalf("run %s: CurrentStep = %+v, want %s attempt %d", id, r.CurrentStep, name, attempt)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitStep(h.RunID(), "charge", 2)
	waitStep(hj.RunID(), "current-job", 1)
	close(release)
	if got := mustResult(t, h); got != 7 {
		t.Fatalf("result %d", got)
	}
	mustResult(t, hj)
	for _, id := range []string{h.RunID(), hj.RunID()} {
		if r := must[*trellis.Run](t)(c.Get(ctx, id)); r.CurrentStep != nil {
			t.Fatalf("finished run %s: CurrentStep = %+v, want none", id, r.CurrentStep)
		}
	}
}
