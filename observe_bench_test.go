package trellis

import (
	"context"
	"testing"

	"github.com/trellis-dev/trellis/store"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// nopExp drops the spans it is given.
type nopExp struct{}

func (nopExp) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (nopExp) Shutdown(context.Context) error                             { return nil }

// BenchmarkObserveRun measures what the built-in tracing and metrics
// interceptors add to a run of workload w1 (one workflow attempt, three step
// attempts), with every trace sampled and spans exported to nowhere:
//
//	go test -run XXX -bench ObserveRun .
func BenchmarkObserveRun(b *testing.B) {
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(nopExp{}))
	defer tp.Shutdown(context.Background())
	b.Run("tracing", func(b *testing.B) { benchChain(b, newChain([]Interceptor{tracingInterceptor(tp)})) })
	b.Run("metrics", func(b *testing.B) { benchChain(b, newChain([]Interceptor{NewMetrics().interceptor()})) })
}

// benchChain runs one w1-shaped attempt through ch per iteration.
func benchChain(b *testing.B, ch *chain) {
	ctx := context.Background()
	step := ch.interceptStep()
	run := &store.Run{ID: "r-0123456789", WorkflowID: "r-0123456789", Workflow: "w1"}
	b.ReportAllocs()
	for b.Loop() {
		a := &WorkflowAttempt{RunID: run.ID, WorkflowID: run.WorkflowID, Workflow: run.Workflow, Queue: "default", Attempt: 1}
		ch.runWorkflow(ctx, 0, a, func(ctx context.Context) {
			for range 3 {
				_ = step(ctx, run, func(context.Context) error { return nil })
			}
			a.Status = StatusSucceeded
		})
	}
}
