package trellis_test

import (
	"context"
	"errors"
	"testing"

	"github.com/trellis-dev/trellis"
)

var streamedOnce = trellis.NewWorkflow("streamed-once", func(wc *trellis.Context, _ int) (int, error) {
	return trellis.Step(wc, "one", func(context.Context) (int, error) { return 1, nil })
})

// A call interceptor around Stream is seen by the loop as it would be by any
// caller: a refusal is the loop's one error, an error it returns instead of the
// stream's comes last, and a loop that broke is not called again.
func TestStreamInterceptorErrors(t *testing.T) {
	refused, replaced := errors.New("refused"), errors.New("replaced")
	var mode string
	ic := trellis.Interceptor{Call: func(ctx context.Context, c *trellis.ClientCall, next func(context.Context) error) error {
		if c.Method != "Stream" {
			return next(ctx)
		}
		switch mode {
		case "refuse":
			return refused
		case "replace":
			_ = next(ctx)
			return replaced
		case "again": // a retrying interceptor: next once more after the first
			_ = next(ctx)
			return next(ctx)
		}
		return next(ctx)
	}}
	c := open(t, storeURL(t), func(cfg *trellis.Config) { cfg.Interceptors = []trellis.Interceptor{ic} })
	register(t, c, streamedOnce)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, streamedOnce, 0))
	mustResult(t, h)

	collect := func(limit int) (events int, errs []error) {
		for ev, err := range c.Stream(ctxT(t), h.RunID(), 0) {
			if err != nil {
				errs = append(errs, err)
				continue
			}
			if ev != nil {
				events++
			}
			if events == limit {
				break
			}
		}
		return events, errs
	}
	mode = "refuse"
	if n, errs := collect(0); n != 0 || len(errs) != 1 || !errors.Is(errs[0], refused) {
		t.Fatalf("refused: %d events, errors %v; want none and the refusal once", n, errs)
	}
	mode = "replace"
	n, errs := collect(0)
	if n < 3 || len(errs) != 1 || !errors.Is(errs[0], replaced) {
		t.Fatalf("replaced: %d events, errors %v; want the run's events, then the interceptor's error once", n, errs)
	}
	mode = "replace"
	if n, errs := collect(1); n != 1 || len(errs) != 0 {
		t.Fatalf("broken after one event: %d events, errors %v; want one event and nothing after", n, errs)
	}
	mode = "again" // the loop broke: the second next delivers nothing (no panic)
	if n, errs := collect(1); n != 1 || len(errs) != 0 {
		t.Fatalf("retried after the loop broke: %d events, errors %v; want one event and nothing after", n, errs)
	}
	mode = ""
	if n2, errs := collect(0); n2 != n || len(errs) != 0 {
		t.Fatalf("plain: %d events, errors %v; want %d events and no error", n2, errs, n)
	}
}
