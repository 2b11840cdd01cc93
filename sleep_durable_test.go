package trellis_test

import (
	"context"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/clock"
)

// A step's result is durable before a short sleep in place begins, so a crash
// during the sleep does not run the step again. The fake clock holds the sleep
// until the step is seen in the store's history.
func TestStepIsDurableBeforeAnInPlaceSleep(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	wf := trellis.NewWorkflow("step-then-nap", func(wc *trellis.Context, _ int) (int, error) {
		n, err := trellis.Step(wc, "charge", func(context.Context) (int, error) { return 7, nil })
		if err != nil {
			return 0, err
		}
		return n, wc.Sleep(time.Second) // under MaxInlineBackoff: waits in place
	})
	c := open(t, storeURL(t), func(cfg *trellis.Config) {
		cfg.Clock = clk
		cfg.Worker.MaxInlineBackoff = time.Minute
	})
	register(t, c, wf)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 0))
	deadline := time.Now().Add(15 * time.Second)
	for !stepDone(t, c, h.RunID(), "charge") {
		if time.Now().After(deadline) {
			t.Fatal("the step is not durable while the run sleeps after it")
		}
		time.Sleep(5 * time.Millisecond)
	}
	clk.Advance(time.Second)
	if got := mustResult(t, h); got != 7 {
		t.Fatalf("result %d", got)
	}
}

func stepDone(t *testing.T, c *trellis.Client, runID, name string) bool {
	t.Helper()
	ops, err := c.History(ctxT(t), runID)
	if err != nil {
		t.Fatal(err)
	}
	for _, op := range ops {
		if op.Name == name && op.Done {
			return true
		}
	}
	return false
}
