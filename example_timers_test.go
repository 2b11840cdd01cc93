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

// Sleep is a durable timer: a sleep longer than WorkerOptions.MaxInlineBackoff
// (2s by default) saves the run as waiting and releases it, and a worker wakes it
// when the time comes, after a crash or a deploy as well. Its history records
// the timer.
func ExampleContext_Sleep() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{
		Store: "sqlite://" + filepath.Join(dir, "trellis.db"),
		// Release the run for any sleep, to show it waiting in the store.
		Worker: trellis.WorkerOptions{MaxInlineBackoff: time.Millisecond},
	})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	reminder := trellis.NewWorkflow("reminder", func(wc *trellis.Context, who string) (string, error) {
		if err := wc.Sleep(300 * time.Millisecond); err != nil { // in production: 24 * time.Hour
			return "", err
		}
		return "reminded " + who, nil
	})
	if err := db.Register(ctx, reminder); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, reminder, "ada", trellis.StartOptions{ID: "remind-ada"})
	if err != nil {
		panic(err)
	}
	for { // the run holds no worker while it sleeps
		run, _ := db.Get(ctx, "remind-ada")
		if run.Status != trellis.StatusPending && run.Status != trellis.StatusRunning {
			fmt.Println(run.Status)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Println(h.Result(ctx))
	history, _ := db.History(ctx, "remind-ada")
	fmt.Println(history[0].Kind, history[0].Done)
	// Output:
	// waiting
	// reminded ada <nil>
	// timer true
}

// Select waits for whichever of several futures is ready first (here an event
// and a timer) and records the winner, so a replay takes the same branch.
func ExampleSelect() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	checkout := trellis.NewWorkflow("checkout", func(wc *trellis.Context, cart string) (string, error) {
		paid := trellis.OnEvent[string](wc, "paid", 0) // no timeout of its own
		abandon := wc.NewTimer(time.Hour)
		i, err := trellis.Select(wc, paid, abandon)
		if err != nil {
			return "", err
		}
		if i == 1 {
			return cart + ": abandoned", nil
		}
		how, err := paid.Get(wc)
		return cart + ": paid by " + how, err
	})
	if err := db.Register(ctx, checkout); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, checkout, "cart-9", trellis.StartOptions{ID: "cart-9"})
	if err != nil {
		panic(err)
	}
	if err := db.SendEvent(ctx, "cart-9", "paid", "card"); err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	// Output: cart-9: paid by card <nil>
}

// Context.NewTimer returns a timer future; with Select it bounds how long a
// workflow waits for something else.
func ExampleContext_NewTimer() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	quote := trellis.NewWorkflow("quote", func(wc *trellis.Context, _ struct{}) (string, error) {
		answer := trellis.OnEvent[int](wc, "price", 0)
		giveUp := wc.NewTimer(50 * time.Millisecond)
		i, err := trellis.Select(wc, answer, giveUp)
		if err != nil {
			return "", err
		}
		if i == 1 {
			return "no answer in time: list price", nil
		}
		price, err := answer.Get(wc)
		return fmt.Sprint(price), err
	})
	if err := db.Register(ctx, quote); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, quote, struct{}{})
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx)) // nobody sends "price"
	// Output: no answer in time: list price <nil>
}

// Events sent to a run are durable when SendEvent returns and are delivered
// once each, in the order they were sent (per name). A wait with a timeout gets
// ErrEventTimeout when none comes.
func ExampleClient_SendEvent() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	collect := trellis.NewWorkflow("collect", func(wc *trellis.Context, _ struct{}) ([]string, error) {
		var got []string
		for {
			v, err := trellis.WaitEvent[string](wc, "line", 100*time.Millisecond)
			if errors.Is(err, trellis.ErrEventTimeout) {
				return got, nil // quiet for 100ms: done
			}
			if err != nil {
				return nil, err
			}
			got = append(got, v)
		}
	})
	if err := db.Register(ctx, collect); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, collect, struct{}{}, trellis.StartOptions{ID: "collect-1"})
	if err != nil {
		panic(err)
	}
	for _, line := range []string{"first", "second", "third"} {
		if err := db.SendEvent(ctx, "collect-1", "line", line); err != nil {
			panic(err)
		}
	}
	fmt.Println(h.Result(ctx))
	// Output: [first second third] <nil>
}
