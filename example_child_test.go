package trellis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/trellis-dev/trellis"
)

// Child starts a run of another workflow and waits for it without holding a
// worker. Its ID is derived from the parent's, so a replay never starts it
// twice.
func ExampleChild() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	invoice := trellis.NewWorkflow("invoice", func(wc *trellis.Context, o Order) (string, error) {
		return fmt.Sprintf("INV-%s-%d", o.ID, o.Amount), nil
	})
	fulfil := trellis.NewWorkflow("fulfil", func(wc *trellis.Context, o Order) (string, error) {
		inv, err := trellis.Child(wc, invoice, o)
		if err != nil {
			return "", err
		}
		return "fulfilled with " + inv, nil
	})
	if err := db.Register(ctx, invoice, fulfil); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, fulfil, Order{ID: "o-3", Amount: 40}, trellis.StartOptions{ID: "fulfil-o-3"})
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	children, _ := db.Children(ctx, "fulfil-o-3", 0)
	fmt.Println(children[0].Workflow, children[0].Status, children[0].ID == h.RunID()+".0")
	// Output:
	// fulfilled with INV-o-3-40 <nil>
	// invoice succeeded true
}

// ChildAsync starts child runs that proceed in parallel; a child that fails
// returns a *ChildError to its parent.
func ExampleChildAsync() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	check := trellis.NewWorkflow("check", func(wc *trellis.Context, host string) (string, error) {
		if strings.HasPrefix(host, "db") {
			return "", errors.New(host + " unreachable")
		}
		return host + " ok", nil
	})
	sweep := trellis.NewWorkflow("sweep", func(wc *trellis.Context, hosts []string) ([]string, error) {
		var futures []*trellis.ChildFuture[string]
		for _, h := range hosts {
			futures = append(futures, trellis.ChildAsync(wc, check, h))
		}
		var report []string
		for _, f := range futures {
			out, err := f.Get(wc)
			var ce *trellis.ChildError
			if errors.As(err, &ce) {
				out = fmt.Sprintf("%s: %s", ce.Status, ce.Message)
			} else if err != nil {
				return nil, err
			}
			report = append(report, out)
		}
		return report, nil
	})
	if err := db.Register(ctx, check, sweep); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, sweep, []string{"web1", "db1", "web2"})
	if err != nil {
		panic(err)
	}
	report, err := h.Result(ctx)
	for _, line := range report {
		fmt.Println(line)
	}
	fmt.Println(err)
	// Output:
	// web1 ok
	// failed: db1 unreachable
	// web2 ok
	// <nil>
}

// Map runs a child workflow per item, at most MaxConcurrency at once, and
// returns the results in item order; the parent's history holds one op
// whatever the number of items.
func ExampleMap() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	square := trellis.NewWorkflow("square", func(wc *trellis.Context, n int) (int, error) { return n * n, nil })
	sum := trellis.NewWorkflow("sum-of-squares", func(wc *trellis.Context, ns []int) (int, error) {
		squares, err := trellis.Map(wc, square, ns, trellis.MapOptions{MaxConcurrency: 4})
		if err != nil {
			return 0, err
		}
		total := 0
		for _, s := range squares {
			total += s
		}
		return total, nil
	})
	if err := db.Register(ctx, square, sum); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, sum, []int{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, trellis.StartOptions{ID: "sum-1"})
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	history, _ := db.History(ctx, "sum-1")
	fmt.Println(len(history), history[0].Kind)
	// Output:
	// 385 <nil>
	// 1 child
}

// With CollectErrors, Map runs every item and reports each failure in a
// *MapError; by default the first failure cancels the rest.
func ExampleMapError() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	parse := trellis.NewWorkflow("parse", func(wc *trellis.Context, s string) (int, error) {
		var n int
		_, err := fmt.Sscan(s, &n)
		return n, err
	})
	batch := trellis.NewWorkflow("batch", func(wc *trellis.Context, lines []string) (string, error) {
		_, err := trellis.Map(wc, parse, lines, trellis.MapOptions{CollectErrors: true})
		var me *trellis.MapError
		if errors.As(err, &me) {
			var bad []string
			for _, it := range me.Items {
				bad = append(bad, fmt.Sprint(it.Index))
			}
			return "bad lines: " + strings.Join(bad, ", "), nil
		}
		return "all good", err
	})
	if err := db.Register(ctx, parse, batch); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, batch, []string{"1", "x", "3", "y"})
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	// Output: bad lines: 1, 3 <nil>
}
