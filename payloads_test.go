package trellis_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// A queue's payload limit holds every payload of its runs: a step result
// above it fails the step at once (not retried) and the run; so do an output,
// a run-store value and an emitted event above it; an event sent to a run of
// the queue is refused. Below it, and in a queue without a limit, all pass.
func TestQueuePayloadLimit(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("x", 2000)
	var attempts atomic.Int32
	wf := trellis.NewWorkflow("plimit", func(wc *trellis.Context, what string) (string, error) {
		switch what {
		case "step":
			return trellis.Step(wc, "big", func(context.Context) (string, error) {
				attempts.Add(1)
				return big, nil
			})
		case "output":
			return big, nil
		case "value":
			return "", wc.Set("k", big)
		case "emit":
			return "", trellis.Emit(wc, "progress", big)
		case "event":
			return trellis.WaitEvent[string](wc, "go", time.Minute)
		}
		return trellis.Step(wc, "small", func(context.Context) (string, error) { return what, nil })
	})
	c := setup(t, wf)
	ctx := ctxT(t)
	if _, err := c.CreateQueue(ctx, "small", trellis.QueueSettings{PayloadLimit: new(1000)}); err != nil {
		t.Fatal(err)
	}
	small := trellis.StartOptions{Queue: "small"}
	for _, what := range []string{"step", "output", "value", "emit"} {
		h := must[*trellis.Handle[string]](t)(trellis.Start(ctx, c, wf, what, small))
		_, err := h.Result(ctx)
		if !errors.Is(err, trellis.ErrPayloadTooLarge) || !strings.Contains(err.Error(), `queue "small" limit 1000`) {
			t.Fatalf("%s over the queue's limit: %v, want ErrPayloadTooLarge naming the queue's limit", what, err)
		}
	}
	if n := attempts.Load(); n != 1 {
		t.Fatalf("the step over the limit was attempted %d times, want 1 (not retryable)", n)
	}
	if got := mustResult(t, must[*trellis.Handle[string]](t)(trellis.Start(ctx, c, wf, "fine", small))); got != "fine" {
		t.Fatalf("a small run in the queue: %q", got)
	}
	// Without a limit on its queue, the same run succeeds.
	attempts.Store(0)
	if got := mustResult(t, must[*trellis.Handle[string]](t)(trellis.Start(ctx, c, wf, "step"))); got != big {
		t.Fatalf("a big step result in the default queue: %d bytes", len(got))
	}
	// Events: refused over the limit of the run's queue, changing nothing.
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctx, c, wf, "event", small))
	waitStatus(t, c, h.RunID(), trellis.StatusWaiting)
	if err := c.SendEvent(ctx, h.RunID(), "go", big); !errors.Is(err, trellis.ErrPayloadTooLarge) {
		t.Fatalf("an event over the queue's limit: %v, want ErrPayloadTooLarge", err)
	}
	if r := must[*trellis.Run](t)(c.Get(ctx, h.RunID())); r.Status != trellis.StatusWaiting {
		t.Fatalf("the refused event changed the run: %s", r.Status)
	}
	if err := c.SendEvent(ctx, h.RunID(), "go", "ok"); err != nil {
		t.Fatal(err)
	}
	if got := mustResult(t, h); got != "ok" {
		t.Fatalf("result %q after a small event", got)
	}
}

// Payloads above the store's threshold (256 KiB) run through the embedded
// engine: a 1 MiB input, a 2 MiB step result and value, a 600 KiB event and
// a 1.6 MiB output, replayed after a suspension, read back whole.
func TestLargePayloadsEmbedded(t *testing.T) {
	t.Parallel()
	in := strings.Repeat("i", 1<<20)
	wf := trellis.NewWorkflow("large", func(wc *trellis.Context, in string) (string, error) {
		res, err := trellis.Step(wc, "double", func(context.Context) (string, error) { return in + in, nil })
		if err != nil {
			return "", err
		}
		if err := wc.Set("v", res); err != nil {
			return "", err
		}
		ev, err := trellis.WaitEvent[string](wc, "go", time.Minute) // suspends: the next claim replays
		if err != nil {
			return "", err
		}
		var v string
		if _, err := wc.Get("v", &v); err != nil {
			return "", err
		}
		return v[:len(in)] + ev, nil
	})
	c := open(t, storeURL(t), func(cfg *trellis.Config) { cfg.MaxPayloadBytes = 64 << 20 })
	register(t, c, wf)
	ctx := ctxT(t)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctx, c, wf, in))
	waitStatus(t, c, h.RunID(), trellis.StatusWaiting)
	ev := strings.Repeat("e", 600<<10)
	if err := c.SendEvent(ctx, h.RunID(), "go", ev); err != nil {
		t.Fatal(err)
	}
	if got := mustResult(t, h); got != in+ev {
		t.Fatalf("output: %d bytes, want %d", len(got), len(in)+len(ev))
	}
	r := must[*trellis.Run](t)(c.Get(ctx, h.RunID()))
	if !bytes.Contains(r.Input, []byte(in)) || len(r.Output) < len(in)+len(ev) {
		t.Fatalf("Get: input %d bytes, output %d bytes", len(r.Input), len(r.Output))
	}
	page := must[*trellis.RunPage](t)(c.List(ctx, trellis.ListOptions{}))
	if len(page.Runs) != 1 || len(page.Runs[0].Input) != 0 {
		t.Fatalf("List loaded the large input (%d runs)", len(page.Runs))
	}
}

// An event to a run of a namespace without a record (so without queue
// records, hence without queue limits) is sent as before.
func TestEventInNamespaceWithoutRecord(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("norecord", func(wc *trellis.Context, _ string) (string, error) {
		return trellis.WaitEvent[string](wc, "go", time.Minute)
	})
	c := open(t, storeURL(t), func(cfg *trellis.Config) { cfg.Namespace = "norecord" })
	register(t, c, wf)
	ctx := ctxT(t)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctx, c, wf, ""))
	if err := c.SendEvent(ctx, h.RunID(), "go", "hi"); err != nil {
		t.Fatalf("an event in a namespace without a record: %v", err)
	}
	if got := mustResult(t, h); got != "hi" {
		t.Fatalf("result %q", got)
	}
}
