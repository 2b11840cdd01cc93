package trellis_test

import (
	"errors"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// versioned is a workflow named "versioned" at version v (also serving
// older): it returns the version its run started with.
func versioned(v int, older ...int) *trellis.Workflow[string, int] {
	return trellis.NewWorkflow("versioned", func(wc *trellis.Context, _ string) (int, error) {
		return wc.Version(), nil
	}, trellis.WorkflowOptions{Version: v, AlsoServes: older})
}

// wantPendingFor fails unless run ref stays pending, never claimed, for a
// while, with wait reason want.
func wantPendingFor(t *testing.T, c *trellis.Client, ref, want string) {
	t.Helper()
	time.Sleep(300 * time.Millisecond) // several claim polls of every worker
	run := must[*trellis.Run](t)(c.Get(ctxT(t), ref))
	if run.Status != trellis.StatusPending || run.Attempts != 0 || run.WaitReason != want {
		t.Fatalf("run %s: %s after %d attempts, wait reason %q; want pending, unclaimed, with %q",
			ref, run.Status, run.Attempts, run.WaitReason, want)
	}
}

// StartOptions.Version pins a run to a version: only a worker that serves it
// (WorkflowOptions.Version, AlsoServes) runs it, through the claim, the
// in-process dispatch of a start and StartMany; until one does, the run waits
// with a reason that names the versions served. A start without a version
// goes to any worker of the workflow, as before.
func TestStartVersionPinsRun(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	v2 := open(t, url)
	register(t, v2, versioned(2))
	starter := open(t, url, func(c *trellis.Config) { c.Worker.Disabled = true })
	register(t, starter, versioned(3, 1))

	// The worker of v2 starts a run pinned to 3: its own worker (free) must
	// not take it at start.
	h3 := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), v2, versioned(2), "x", trellis.StartOptions{Version: 3}))
	if run := must[*trellis.Run](t)(v2.Get(ctxT(t), h3.RunID())); !run.Pinned || run.Version != 3 {
		t.Fatalf("run pinned to 3 reads Pinned %v, version %d", run.Pinned, run.Version)
	}
	h1 := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), starter, versioned(3, 1), "x", trellis.StartOptions{Version: 1}))
	many := must[[]trellis.StartResult](t)(starter.StartMany(ctxT(t), []trellis.StartRequest{
		{Workflow: "versioned", Input: []byte(`"a"`), Options: trellis.StartOptions{Version: 2}},
		{Workflow: "versioned", Input: []byte(`"b"`), Options: trellis.StartOptions{Version: 3}},
	}))
	h2 := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), starter, versioned(3, 1), "x", trellis.StartOptions{Version: 2}))
	free := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), starter, versioned(3, 1), "x"))

	if got := mustResult(t, h2); got != 2 {
		t.Fatalf("run pinned to 2 ran as version %d", got)
	}
	// Not pinned: the starter's registered version (3), run by the worker of 2.
	if got := mustResult(t, free); got != 3 {
		t.Fatalf("run not pinned ran as version %d, want 3 (the starter's)", got)
	}
	waitStatus(t, starter, many[0].Run.ID, trellis.StatusSucceeded)
	want := `version 3 of workflow "versioned" is served by no live worker; live workers serve version 2`
	wantPendingFor(t, starter, h3.RunID(), want)
	wantPendingFor(t, starter, many[1].Run.ID, want)
	wantPendingFor(t, starter, h1.RunID(),
		`version 1 of workflow "versioned" is served by no live worker; live workers serve version 2`)

	// A worker of 3 that still serves 1 takes the rest.
	v3 := open(t, url)
	register(t, v3, versioned(3, 1))
	if got := mustResult(t, h3); got != 3 {
		t.Fatalf("run pinned to 3 ran as version %d", got)
	}
	if got := mustResult(t, h1); got != 1 {
		t.Fatalf("run pinned to 1 ran as version %d", got)
	}
	if run := waitStatus(t, starter, many[1].Run.ID, trellis.StatusSucceeded); string(run.Output) != "3" {
		t.Fatalf("batch run pinned to 3 returned %s", run.Output)
	}
}

// Versions out of range are refused and start or register nothing.
func TestStartVersionInvalid(t *testing.T) {
	t.Parallel()
	c := setup(t, versioned(1))
	for _, v := range []int{-1, 1 << 31} {
		if _, err := trellis.Start(ctxT(t), c, versioned(1), "x", trellis.StartOptions{Version: v}); !errors.Is(err, trellis.ErrInvalidParams) {
			t.Fatalf("Start with version %d: %v, want ErrInvalidParams", v, err)
		}
		if _, err := c.StartRaw(ctxT(t), "versioned", []byte(`"x"`), trellis.StartOptions{Version: v}); !errors.Is(err, trellis.ErrInvalidParams) {
			t.Fatalf("StartRaw with version %d: %v, want ErrInvalidParams", v, err)
		}
		_, err := c.StartMany(ctxT(t), []trellis.StartRequest{{Workflow: "versioned", Input: []byte(`"x"`)},
			{Workflow: "versioned", Input: []byte(`"x"`), Options: trellis.StartOptions{Version: v}}})
		if !errors.Is(err, trellis.ErrInvalidParams) {
			t.Fatalf("StartMany with version %d: %v, want ErrInvalidParams", v, err)
		}
	}
	if page := must[*trellis.RunPage](t)(c.List(ctxT(t), trellis.ListOptions{})); len(page.Runs) != 0 {
		t.Fatalf("refused starts created %d runs", len(page.Runs))
	}
	for _, wf := range []*trellis.Workflow[string, int]{
		trellis.NewWorkflow("bad-version", func(*trellis.Context, string) (int, error) { return 0, nil }, trellis.WorkflowOptions{Version: -1}),
		trellis.NewWorkflow("bad-older", func(*trellis.Context, string) (int, error) { return 0, nil }, trellis.WorkflowOptions{Version: 2, AlsoServes: []int{0}}),
	} {
		if err := c.Register(ctxT(t), wf); !errors.Is(err, trellis.ErrInvalidParams) {
			t.Fatalf("Register(%s): %v, want ErrInvalidParams", wf.Name(), err)
		}
	}
	ws := must[[]*trellis.WorkerRecord](t)(c.Workers(ctxT(t)))
	for _, w := range ws {
		for _, name := range w.Workflows {
			if name != "versioned" {
				t.Fatalf("a refused registration is served: %v", w.Workflows)
			}
		}
	}
}
