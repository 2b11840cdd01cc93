package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/trellis-dev/trellis"
)

// The example workflows that "trellis dev" runs. They are written the way an
// application would write them: each side effect is a step, and everything else
// (IDs, stored values) goes through the workflow Context so that a replay sees the
// same values. The steps only sleep, to stand in for real work.

// greetWorkflow: three quick steps in a row.
var greetWorkflow = trellis.NewWorkflow("greet", func(wc *trellis.Context, name string) (string, error) {
	user, err := trellis.Step(wc, "look-up-user", func(ctx context.Context) (string, error) {
		return name, work(ctx, 300*time.Millisecond)
	})
	if err != nil {
		return "", err
	}
	msg, err := trellis.Step(wc, "compose", func(ctx context.Context) (string, error) {
		return "Hello, " + user + "!", work(ctx, 100*time.Millisecond)
	})
	if err != nil {
		return "", err
	}
	_, err = trellis.Step(wc, "send", func(ctx context.Context) (bool, error) {
		return true, work(ctx, 200*time.Millisecond)
	})
	return msg, err
})

type order struct {
	ID     string `json:"id"`
	SKU    string `json:"sku"`
	Amount int    `json:"amount_cents"`
}

type receipt struct {
	OrderID   string `json:"order_id"`
	PaymentID string `json:"payment_id"`
	ChargeID  string `json:"charge_id"`
	Amount    int    `json:"amount_cents"`
}

// chargeRetry retries the charge after 3s: longer than the worker's inline backoff
// (2s by default), so the run is released and visibly waits in the store.
var chargeRetry = trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 3, Backoff: trellis.Fixed(3 * time.Second)}}

// chargeOrderWorkflow: two steps in parallel, a recorded UUID, a step whose first
// attempt fails (so the run waits on a retry backoff) and a stored receipt.
var chargeOrderWorkflow = trellis.NewWorkflow("charge-order", func(wc *trellis.Context, o order) (receipt, error) {
	stock := trellis.Async(wc, "reserve-stock", func(ctx context.Context) (int, error) {
		return 1, work(ctx, 300*time.Millisecond)
	})
	fraud := trellis.Async(wc, "fraud-check", func(ctx context.Context) (string, error) {
		return "low-risk", work(ctx, 200*time.Millisecond)
	})
	if _, err := stock.Get(wc); err != nil {
		return receipt{}, err
	}
	if _, err := fraud.Get(wc); err != nil {
		return receipt{}, err
	}
	paymentID := wc.UUID() // recorded: the retry after the backoff replays the same ID
	chargeID, err := trellis.Step(wc, "charge", func(ctx context.Context) (string, error) {
		if trellis.StepInfo(ctx).Attempt == 1 {
			return "", errors.New("payment gateway timed out (the demo's first attempt always does)")
		}
		return "ch_" + paymentID[:8], work(ctx, 100*time.Millisecond)
	}, chargeRetry)
	if err != nil {
		return receipt{}, err
	}
	r := receipt{OrderID: o.ID, PaymentID: paymentID, ChargeID: chargeID, Amount: o.Amount}
	if err := wc.Set("receipt", r); err != nil {
		return receipt{}, err
	}
	return r, nil
})

// syncInventoryWorkflow fails for good: its step fails every attempt (short, inline
// backoffs), and the workflow returns the error, so the run ends failed.
var syncInventoryWorkflow = trellis.NewWorkflow("sync-inventory", func(wc *trellis.Context, warehouse string) (int, error) {
	n, err := trellis.Step(wc, "call-warehouse", func(ctx context.Context) (int, error) {
		return 0, fmt.Errorf("warehouse %s answered 503 Service Unavailable", warehouse)
	}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 3, Backoff: trellis.Fixed(400 * time.Millisecond)}})
	if err != nil {
		return 0, fmt.Errorf("syncing inventory: %w", err)
	}
	return n, nil
})

func demoWorkflows() []trellis.Registrable {
	return []trellis.Registrable{greetWorkflow, chargeOrderWorkflow, syncInventoryWorkflow}
}

// demoRun is a run that dev started and watches.
type demoRun struct {
	RunID, Workflow, WorkflowID string
}

// startDemoRuns starts the demo's runs; suffix makes their workflow IDs unique to
// this invocation, so dev can run again on the same store.
func startDemoRuns(ctx context.Context, c *trellis.Client, suffix string) ([]demoRun, error) {
	starts := []func() (demoRun, error){
		func() (demoRun, error) { return start(ctx, c, greetWorkflow, "Ada", "greet-ada-"+suffix) },
		func() (demoRun, error) { return start(ctx, c, greetWorkflow, "Grace", "greet-grace-"+suffix) },
		func() (demoRun, error) {
			o := order{ID: "order-1001", SKU: "tea-kettle", Amount: 4999}
			return start(ctx, c, chargeOrderWorkflow, o, "order-1001-"+suffix)
		},
		func() (demoRun, error) { return start(ctx, c, syncInventoryWorkflow, "north", "sync-north-"+suffix) },
	}
	runs := make([]demoRun, 0, len(starts))
	for _, s := range starts {
		r, err := s()
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	return runs, nil
}

func start[In, Out any](ctx context.Context, c *trellis.Client, wf *trellis.Workflow[In, Out], in In, id string) (demoRun, error) {
	h, err := trellis.Start(ctx, c, wf, in, trellis.StartOptions{ID: id})
	if err != nil {
		return demoRun{}, err
	}
	return demoRun{RunID: h.RunID(), Workflow: wf.Name(), WorkflowID: h.ID()}, nil
}

// work stands in for a step's real work: it takes d, or less if ctx ends.
func work(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
