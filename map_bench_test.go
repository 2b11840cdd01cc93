package trellis_test

import (
	"context"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// BenchmarkMap10000 fans out 10,000 one-step child runs, at most 50 at a time, and
// waits for their results in item order. The parent is claimed twice whatever the
// number of items (start, then the group's end).
//
//	go test -run x -bench Map10000 -benchtime 1x .
//	TRELLIS_TEST_STORE=postgres go test -run x -bench Map10000 -benchtime 1x .
func BenchmarkMap10000(b *testing.B) {
	item := trellis.NewWorkflow("bench-map-item", func(wc *trellis.Context, n int) (int, error) {
		return trellis.Step(wc, "x", func(context.Context) (int, error) { return n + 1, nil })
	})
	parent := trellis.NewWorkflow("bench-map", func(wc *trellis.Context, n int) (int, error) {
		items := make([]int, n)
		for i := range items {
			items[i] = i
		}
		out, err := trellis.Map(wc, item, items, trellis.MapOptions{MaxConcurrency: 50})
		return len(out), err
	})
	cfg := trellis.Config{Store: storeURL(b)}
	c, err := trellis.Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if err := c.Register(context.Background(), item, parent); err != nil {
		b.Fatal(err)
	}
	const items = 10000
	b.ResetTimer()
	for range b.N {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		h, err := trellis.Start(ctx, c, parent, items)
		if err == nil {
			_, err = h.Result(ctx)
		}
		cancel()
		if err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(items*b.N)/b.Elapsed().Seconds(), "items/s")
}
