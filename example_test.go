package trellis_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/trellis-dev/trellis"
)

type Order struct {
	ID     string
	Amount int
}

type Receipt struct {
	Order   string
	Charged int
	Emailed bool
}

// A workflow with a retried step, a run-store value and two parallel steps.
func Example() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()

	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	charge := trellis.NewWorkflow("charge-order", func(wc *trellis.Context, o Order) (Receipt, error) {
		charged, err := trellis.Step(wc, "charge", func(ctx context.Context) (int, error) {
			// Pass the idempotency key to the payment provider: the step may run again
			// after a crash, its recorded result is used exactly once.
			_ = trellis.StepInfo(ctx).IdempotencyKey
			return o.Amount, nil
		}, trellis.StepOptions{
			Retry:   trellis.RetryPolicy{MaxAttempts: 5, Backoff: trellis.Exponential(time.Second, 2, time.Minute)},
			Timeout: 10 * time.Second,
		})
		if err != nil {
			return Receipt{}, err
		}
		if err := wc.Set("charged", charged); err != nil {
			return Receipt{}, err
		}
		email := trellis.Async(wc, "email", func(ctx context.Context) (bool, error) { return true, nil })
		ledger := trellis.Async(wc, "ledger", func(ctx context.Context) (string, error) { return "ok", nil })
		emailed, err := email.Get(wc)
		if err != nil {
			return Receipt{}, err
		}
		if _, err := ledger.Get(wc); err != nil {
			return Receipt{}, err
		}
		return Receipt{Order: o.ID, Charged: charged, Emailed: emailed}, nil
	})
	if err := db.Register(ctx, charge); err != nil {
		panic(err)
	}

	h, err := trellis.Start(ctx, db, charge, Order{ID: "order-42", Amount: 1200}, trellis.StartOptions{ID: "order-42"})
	if err != nil {
		panic(err)
	}
	receipt, err := h.Result(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Printf("%+v\n", receipt)

	history, _ := db.History(ctx, "order-42")
	for _, op := range history {
		fmt.Println(op.Position, op.Kind, op.Name)
	}
	// Output:
	// {Order:order-42 Charged:1200 Emailed:true}
	// 0 step charge
	// 1 set charged
	// 2 step email
	// 3 step ledger
}

// Patched lets code change while runs are in flight: runs that passed this point on
// the old code keep the old branch on replay.
func ExampleContext_Patched() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, _ := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	defer db.Close()

	greet := trellis.NewWorkflow("greet", func(wc *trellis.Context, name string) (string, error) {
		if wc.Patched("shout") {
			return strings.ToUpper("hello " + name), nil
		}
		return "hello " + name, nil
	})
	db.Register(ctx, greet)
	h, _ := trellis.Start(ctx, db, greet, "ada")
	out, _ := h.Result(ctx)
	fmt.Println(out)
	// Output: HELLO ADA
}
