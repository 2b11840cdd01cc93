package trellis_test

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// A client that holds no workflow code starts a run by name; the run takes the
// options given (queue "default", version 0) and a worker that registered the
// workflow runs it.
func TestStartRawWithoutRegister(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	producer := open(t, url, func(cfg *trellis.Config) { cfg.Worker.Disabled = true })
	run := must[*trellis.Run](t)(producer.StartRaw(ctxT(t), "greet", []byte(`"ada"`), trellis.StartOptions{ID: "greet-1", Priority: 2}))
	if run.Workflow != "greet" || run.WorkflowID != "greet-1" || run.Queue != "default" ||
		run.Version != 0 || run.Priority != 2 || run.Status != trellis.StatusPending {
		t.Fatalf("run = %+v, want greet/greet-1 on queue default, version 0, priority 2, pending", run)
	}
	wf := trellis.NewWorkflow("greet", func(wc *trellis.Context, name string) (string, error) { return "hello " + name, nil },
		trellis.WorkflowOptions{Version: 4})
	register(t, open(t, url), wf)
	done := waitStatus(t, producer, "greet-1", trellis.StatusSucceeded)
	if string(done.Output) != `"hello ada"` {
		t.Fatalf("output %s", done.Output)
	}

	queued := must[*trellis.Run](t)(producer.StartRaw(ctxT(t), "greet", []byte(`"bob"`), trellis.StartOptions{Queue: "mail"}))
	if queued.Queue != "mail" {
		t.Fatalf("queue %q, want mail", queued.Queue)
	}
}

// A registered name keeps its definition: its queue and version, and its input check.
func TestStartRawRegisteredUsesDefinition(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("defined", func(wc *trellis.Context, n int) (int, error) { return n, nil },
		trellis.WorkflowOptions{Queue: "billing", Version: 3})
	c := open(t, storeURL(t), func(cfg *trellis.Config) { cfg.Worker.Disabled = true })
	register(t, c, wf)
	run := must[*trellis.Run](t)(c.StartRaw(ctxT(t), "defined", []byte(`7`), trellis.StartOptions{}))
	if run.Queue != "billing" || run.Version != 3 {
		t.Fatalf("run = %+v, want queue billing, version 3", run)
	}
	if _, err := c.StartRaw(ctxT(t), "defined", []byte(`"seven"`), trellis.StartOptions{}); !errors.Is(err, trellis.ErrInvalidInput) {
		t.Fatalf("undecodable input: %v", err)
	}
	if _, err := c.StartRaw(ctxT(t), "", []byte(`7`), trellis.StartOptions{}); !errors.Is(err, trellis.ErrInvalidParams) {
		t.Fatalf("empty name: %v", err)
	}
	page := must[*trellis.RunPage](t)(c.List(ctxT(t), trellis.ListOptions{}))
	if len(page.Runs) != 1 {
		t.Fatalf("%d runs, want only the valid one", len(page.Runs))
	}
}

// A delayed start waits in the store, unclaimed, until its time, even where its
// workflow runs (no direct dispatch); then the worker takes it.
func TestStartAtDelaysTheRun(t *testing.T) {
	t.Parallel()
	var skew atomic.Int64 // how far the test clock is ahead of the wall clock
	now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	wf := trellis.NewWorkflow("later", func(wc *trellis.Context, n int) (int, error) { return n + 1, nil })
	c := open(t, storeURL(t), func(cfg *trellis.Config) { cfg.Now = now })
	register(t, c, wf)
	at := now().Add(time.Hour).Truncate(time.Millisecond)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 1, trellis.StartOptions{StartAt: at}))
	run := must[*trellis.Run](t)(c.Get(ctxT(t), h.RunID()))
	if run.Status != trellis.StatusPending || run.Attempts != 0 || !run.AvailableAt.Equal(at) {
		t.Fatalf("run = %+v, want pending, never claimed, available at %s", run, at)
	}
	raw := must[*trellis.Run](t)(c.StartRaw(ctxT(t), "later", []byte(`5`), trellis.StartOptions{StartAt: at}))
	if raw.Status != trellis.StatusPending || !raw.AvailableAt.Equal(at) {
		t.Fatalf("StartRaw run = %+v, want pending until %s", raw, at)
	}
	skew.Store(int64(2 * time.Hour))
	if got := mustResult(t, h); got != 2 {
		t.Fatalf("result %d", got)
	}
	if done := waitStatus(t, c, raw.ID, trellis.StatusSucceeded); done.StartedAt.Before(at) {
		t.Fatalf("started at %s, before %s", done.StartedAt, at)
	}
}
