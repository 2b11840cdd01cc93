package trellis_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// BenchmarkTimerLateness measures how late durable timers of 50 ms fire when the
// run is released while it sleeps (MaxInlineBackoff below the timer): the worker
// sleeps until the next due time, claims the run and replays it. It reports the
// p50 and p99 lateness, from the due time to the step after the timer.
//
//	go test -run x -bench TimerLateness -benchtime 200x .
func BenchmarkTimerLateness(b *testing.B) {
	var (
		mu   sync.Mutex
		late []time.Duration
	)
	wf := trellis.NewWorkflow("bench-timer", func(wc *trellis.Context, _ int) (int, error) {
		t := wc.NewTimer(50 * time.Millisecond)
		if err := t.Wait(wc); err != nil {
			return 0, err
		}
		return trellis.Step(wc, "after", func(context.Context) (int, error) {
			mu.Lock()
			late = append(late, time.Since(t.At()))
			mu.Unlock()
			return 0, nil
		})
	})
	cfg := trellis.Config{Store: storeURL(b)}
	cfg.Worker.MaxInlineBackoff = time.Millisecond // release the run while it sleeps
	c, err := trellis.Open(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	if err := c.Register(context.Background(), wf); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := range b.N {
		h, err := trellis.Start(context.Background(), c, wf, i)
		if err == nil {
			_, err = h.Result(context.Background())
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(late)
	b.ReportMetric(float64(late[len(late)/2].Microseconds())/1000, "p50-late-ms")
	b.ReportMetric(float64(late[len(late)*99/100].Microseconds())/1000, "p99-late-ms")
}
