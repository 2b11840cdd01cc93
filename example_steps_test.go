package trellis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/trellis-dev/trellis"
)

// A step that fails twice and succeeds on its third attempt: each failed
// attempt is recorded with its error, and the workflow sees only the result.
func ExampleStep() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	calls := 0
	fetch := trellis.NewWorkflow("fetch", func(wc *trellis.Context, url string) (string, error) {
		return trellis.Step(wc, "get", func(ctx context.Context) (string, error) {
			calls++
			if calls < 3 {
				return "", fmt.Errorf("connection reset (call %d)", calls)
			}
			return "200 OK from " + url, nil
		}, trellis.StepOptions{
			Retry: trellis.RetryPolicy{MaxAttempts: 5, Backoff: trellis.Fixed(time.Millisecond)},
		})
	})
	if err := db.Register(ctx, fetch); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, fetch, "https://example.com", trellis.StartOptions{ID: "fetch-1"})
	if err != nil {
		panic(err)
	}
	out, err := h.Result(ctx)
	fmt.Println(out, err)

	history, _ := db.History(ctx, "fetch-1")
	fmt.Println("attempts:", history[0].Attempts)
	for _, a := range history[0].AttemptLog {
		fmt.Println(a.Attempt, a.Outcome, a.Error.Message)
	}
	// Output:
	// 200 OK from https://example.com <nil>
	// attempts: 3
	// 1 failed connection reset (call 1)
	// 2 failed connection reset (call 2)
}

// NonRetryable ends a step at once, whatever attempts its policy has left; the
// workflow gets a *StepError carrying the recorded message.
func ExampleNonRetryable() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	charge := trellis.NewWorkflow("charge", func(wc *trellis.Context, card string) (string, error) {
		_, err := trellis.Step(wc, "charge", func(ctx context.Context) (string, error) {
			return "", trellis.NonRetryable(errors.New("card declined"))
		})
		var se *trellis.StepError
		if errors.As(err, &se) {
			return fmt.Sprintf("step %s failed after %d attempt(s): %s", se.Step, se.Attempts, se.Message), nil
		}
		return "charged", err
	})
	if err := db.Register(ctx, charge); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, charge, "4242")
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	// Output: step charge failed after 1 attempt(s): card declined <nil>
}

// A step whose last attempt fails fails the run: Result returns a *RunError.
func ExampleRunError() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	flaky := trellis.NewWorkflow("flaky", func(wc *trellis.Context, _ struct{}) (int, error) {
		return trellis.Step(wc, "call", func(ctx context.Context) (int, error) {
			return 0, errors.New("service unavailable")
		}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Fixed(time.Millisecond)}})
	})
	if err := db.Register(ctx, flaky); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, flaky, struct{}{}, trellis.StartOptions{ID: "flaky-1"})
	if err != nil {
		panic(err)
	}
	_, err = h.Result(ctx)
	var re *trellis.RunError
	if errors.As(err, &re) {
		fmt.Println(re.Status, re.Message)
	}
	run, _ := db.Get(ctx, "flaky-1")
	fmt.Println(run.Status, run.Error.Message)
	// Output:
	// failed step "call" failed after 2 attempt(s): service unavailable
	// failed step "call" failed after 2 attempt(s): service unavailable
}

// Async starts steps that run in parallel; Get waits for each. The history
// records them in the order the workflow started them.
func ExampleAsync() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	quote := trellis.NewWorkflow("quote", func(wc *trellis.Context, item string) (int, error) {
		var futures []*trellis.Future[int]
		for i, supplier := range []string{"acme", "globex", "initech"} {
			futures = append(futures, trellis.Async(wc, "ask-"+supplier, func(ctx context.Context) (int, error) {
				return 100 + 10*i, nil // a call to the supplier's API
			}))
		}
		best := 0
		for _, f := range futures {
			price, err := f.Get(wc)
			if err != nil {
				return 0, err
			}
			if best == 0 || price < best {
				best = price
			}
		}
		return best, nil
	})
	if err := db.Register(ctx, quote); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, quote, "bolts", trellis.StartOptions{ID: "quote-1"})
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	history, _ := db.History(ctx, "quote-1")
	for _, op := range history {
		fmt.Println(op.Position, op.Kind, op.Name, string(op.Result))
	}
	// Output:
	// 100 <nil>
	// 0 step ask-acme 100
	// 1 step ask-globex 110
	// 2 step ask-initech 120
}

// StepInfo gives a step its idempotency key, the same on every attempt and
// replay: pass it to the system the step calls so that an effect repeated after
// a crash is applied once.
func ExampleStepInfo() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	var keys []string
	pay := trellis.NewWorkflow("pay", func(wc *trellis.Context, amount int) (bool, error) {
		return trellis.Step(wc, "transfer", func(ctx context.Context) (bool, error) {
			info := trellis.StepInfo(ctx)
			keys = append(keys, info.IdempotencyKey[len(wc.RunID()):]) // "<run id>/<position>"
			if info.Attempt == 1 {
				return false, errors.New("timeout talking to the bank") // did the transfer happen?
			}
			return true, nil // the bank deduplicated the retry by its key
		}, trellis.StepOptions{Retry: trellis.RetryPolicy{Backoff: trellis.Fixed(time.Millisecond)}})
	})
	if err := db.Register(ctx, pay); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, pay, 100)
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	fmt.Println(keys)
	// Output:
	// true <nil>
	// [/0 /0]
}

// An at-most-once step records the start of each attempt before its function
// runs: if the process dies during the attempt, the step is not run again and
// the workflow gets ErrStepOutcomeUnknown instead (or, with OnUnknown, the run
// fails or asks a person).
func ExampleStepOptions_atMostOnce() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	notify := trellis.NewWorkflow("notify", func(wc *trellis.Context, to string) (string, error) {
		sent, err := trellis.Step(wc, "send-sms", func(ctx context.Context) (string, error) {
			return "sent to " + to, nil // an SMS gateway with no idempotency keys
		}, trellis.StepOptions{
			AtMostOnce: true,
			Retry:      trellis.RetryPolicy{MaxAttempts: 1}, // and never retried after a reported failure
		})
		if errors.Is(err, trellis.ErrStepOutcomeUnknown) {
			return "unknown: ask the customer", nil
		}
		return sent, err
	})
	if err := db.Register(ctx, notify); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, notify, "+15550100")
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	// Output: sent to +15550100 <nil>
}

// A step's Timeout bounds each attempt: the attempt's context ends, the attempt
// fails with ErrStepTimeout, and the policy retries it.
func ExampleStepOptions_timeout() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	lookup := trellis.NewWorkflow("lookup", func(wc *trellis.Context, _ struct{}) (string, error) {
		return trellis.Step(wc, "dns", func(ctx context.Context) (string, error) {
			if trellis.StepInfo(ctx).Attempt == 1 {
				<-ctx.Done() // hangs until its timeout
				return "", ctx.Err()
			}
			return "93.184.216.34", nil
		}, trellis.StepOptions{
			Timeout: 20 * time.Millisecond,
			Retry:   trellis.RetryPolicy{MaxAttempts: 3, Backoff: trellis.Fixed(time.Millisecond)},
		})
	})
	if err := db.Register(ctx, lookup); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, lookup, struct{}{}, trellis.StartOptions{ID: "lookup-1"})
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	history, _ := db.History(ctx, "lookup-1")
	fmt.Println(history[0].AttemptLog[0].Error.Type)
	// Output:
	// 93.184.216.34 <nil>
	// step_timeout
}
