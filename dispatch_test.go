package trellis_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// A run started where its workflow runs, with a free worker slot, is created
// already claimed: it is running when Start returns.
func TestStartDispatchesToTheLocalWorker(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	wf := trellis.NewWorkflow("dispatch", func(wc *trellis.Context, _ int) (string, error) {
		return trellis.Step(wc, "wait", func(context.Context) (string, error) { <-release; return "ok", nil })
	})
	c := setup(t, wf)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, 0))
	run := must[*trellis.Run](t)(c.Get(ctxT(t), h.RunID()))
	if run.Status != trellis.StatusRunning || run.Attempts != 1 || run.LeaseOwner == "" {
		t.Fatalf("run right after Start = %+v, want running, attempt 1, leased", run)
	}
	close(release)
	if got := mustResult(t, h); got != "ok" {
		t.Fatalf("result %q", got)
	}
}

// A run whose workflow this client does not run is left for the claim loop of
// the worker that does.
func TestStartDoesNotDispatchOtherQueues(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("other-queue", func(wc *trellis.Context, _ int) (int, error) { return 1, nil },
		trellis.WorkflowOptions{Queue: "elsewhere"})
	c := open(t, storeURL(t), func(cfg *trellis.Config) { cfg.Worker.Queues = []string{"here"} })
	register(t, c, wf)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 0))
	run := must[*trellis.Run](t)(c.Get(ctxT(t), h.RunID()))
	if run.Status != trellis.StatusPending || run.Attempts != 0 {
		t.Fatalf("run = %+v, want pending and never claimed", run)
	}
}

// Wait on a run executed in this process returns what the executor committed:
// the same record Get reads back, field for field.
func TestWaitLocalOutcomeMatchesStore(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	ok := trellis.NewWorkflow("local-ok", func(wc *trellis.Context, in int) (int, error) {
		return trellis.Step(wc, "double", func(context.Context) (int, error) { <-gate; return in * 2, nil })
	})
	bad := trellis.NewWorkflow("local-bad", func(wc *trellis.Context, in int) (int, error) {
		<-gate
		return 0, trellis.NonRetryable(errors.New("refused"))
	})
	c := setup(t, ok, bad)
	for _, wf := range []*trellis.Workflow[int, int]{ok, bad} {
		h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 21))
		// Let the run finish a little after Wait starts waiting (either way the
		// records must match; this way Wait takes the in-process path).
		time.AfterFunc(20*time.Millisecond, func() { gate <- struct{}{} })
		waited := must[*trellis.Run](t)(c.Wait(ctxT(t), h.RunID()))
		got := must[*trellis.Run](t)(c.Get(ctxT(t), h.RunID()))
		a, _ := json.Marshal(waited)
		b, _ := json.Marshal(got)
		if string(a) != string(b) {
			t.Fatalf("%s: Wait returned\n%s\nGet returns\n%s", wf.Name(), a, b)
		}
	}
}
