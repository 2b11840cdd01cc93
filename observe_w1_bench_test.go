package trellis_test

import (
	"context"
	"sync"
	"testing"

	"github.com/trellis-dev/trellis"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// observedSteps is workload w1's workflow: three no-op steps.
var observedSteps = trellis.NewWorkflow("observed-3-steps", func(wc *trellis.Context, _ int) (string, error) {
	var out string
	for _, name := range []string{"a", "b", "c"} {
		s, err := trellis.Step(wc, name, func(context.Context) (string, error) { return "ok", nil })
		if err != nil {
			return "", err
		}
		out = s
	}
	return out, nil
})

// dropSpans is a span exporter that drops what it is given.
type dropSpans struct{}

func (dropSpans) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (dropSpans) Shutdown(context.Context) error                             { return nil }

// BenchmarkObserveW1 runs workload w1's workflow on an embedded client on
// SQLite, 1,000 runs at a time, without and with the built-in metrics and
// tracing (every span sampled, batched, then dropped). The allocations per run
// are what observing costs the garbage collector; the time per run moves with
// the machine (trellis bench --observe measures the throughput):
//
//	go test -run XXX -bench ObserveW1 -benchtime 20000x .
func BenchmarkObserveW1(b *testing.B) {
	for _, observe := range []bool{false, true} {
		name := "off"
		if observe {
			name = "on"
		}
		b.Run(name, func(b *testing.B) {
			cfg := trellis.Config{Store: sqliteURL(b)}
			cfg.Worker.Concurrency = 1000
			if observe {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(dropSpans{}))
				b.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
				cfg.Metrics, cfg.TracerProvider = trellis.NewMetrics(), tp
			}
			ctx := context.Background()
			c, err := trellis.Open(ctx, cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			if err := c.Register(ctx, observedSteps); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for left := b.N; left > 0; left -= 1000 {
				var wg sync.WaitGroup
				for i := range min(left, 1000) {
					wg.Go(func() {
						h, err := trellis.Start(ctx, c, observedSteps, i)
						if err == nil {
							_, err = h.Result(ctx)
						}
						if err != nil {
							b.Error(err)
						}
					})
				}
				wg.Wait()
			}
		})
	}
}
