package trellistest

import (
	"time"

	"github.com/trellis-dev/trellis"
)

// Start starts a run of wf with input in and returns its handle; an error fails
// the test. The run is executed by the environment's worker.
func Start[In, Out any](e *Env, wf *trellis.Workflow[In, Out], in In, opts ...trellis.StartOptions) *trellis.Handle[Out] {
	e.t.Helper()
	ctx, cancel := e.ctx()
	defer cancel()
	h, err := trellis.Start(ctx, e.c, wf, in, opts...)
	if err != nil {
		e.fatalf("starting %s: %v", wf.Name(), err)
	}
	return h
}

// Result returns the outcome of the run of h, skipping time: whenever every run
// has settled and this one is not finished, the fake clock jumps to the next
// time a run is due (a timer, a timeout, a retry). It fails the test if the run
// waits for something no time can bring (an event or an approval decision that
// the test has not sent).
func Result[Out any](e *Env, h *trellis.Handle[Out]) (Out, error) {
	e.t.Helper()
	e.Finish(h.RunID())
	ctx, cancel := e.ctx()
	defer cancel()
	return h.Result(ctx)
}

// Finish settles the runs and skips time (see Result) until the run is
// finished, and returns it.
func (e *Env) Finish(ref string) *trellis.Run {
	e.t.Helper()
	for {
		e.Settle()
		run := e.Get(ref)
		if run.Status.Terminal() {
			return run
		}
		if run.Status == trellis.StatusBlocked {
			e.fatalf("run %s is blocked: %s", run.ID, errorText(run))
		}
		next, ok := e.nextDue()
		if !ok {
			e.fatalf("run %s is %s and nothing is due: %s", run.ID, run.Status, run.WaitReason)
		}
		e.clk.Set(next)
	}
}

func errorText(r *trellis.Run) string {
	if r.Error == nil {
		return ""
	}
	return r.Error.Message
}

// Get returns a run by run ID or workflow ID; an error fails the test.
func (e *Env) Get(ref string) *trellis.Run {
	e.t.Helper()
	ctx, cancel := e.ctx()
	defer cancel()
	r, err := e.c.Get(ctx, ref)
	if err != nil {
		e.fatalf("getting run %s: %v", ref, err)
	}
	return r
}

// WaitStatus waits (in wall time, without moving the clock) until the run is in
// status want and returns it; a run that is finished in another status, or does
// not reach it within Options.Timeout, fails the test.
func (e *Env) WaitStatus(ref string, want trellis.Status) *trellis.Run {
	e.t.Helper()
	deadline := time.Now().Add(e.timeout)
	for {
		r := e.Get(ref)
		switch {
		case r.Status == want:
			return r
		case r.Status.Terminal():
			e.fatalf("run %s ended %s (%s), want %s", r.ID, r.Status, errorText(r), want)
		case time.Now().After(deadline):
			e.fatalf("run %s is %s after %s, want %s", r.ID, r.Status, e.timeout, want)
		}
		time.Sleep(time.Millisecond) // polling: see Settle
	}
}

// SendEvent sends an event to a run and waits until the runs have settled.
func (e *Env) SendEvent(ref, name string, payload any) {
	e.t.Helper()
	ctx, cancel := e.ctx()
	defer cancel()
	if err := e.c.SendEvent(ctx, ref, name, payload); err != nil {
		e.fatalf("sending event %q to %s: %v", name, ref, err)
	}
	e.Settle()
}

// Approve approves the pending approval request name of a run (once the run has
// made it) and waits until the runs have settled.
func (e *Env) Approve(ref, name string) { e.decide(ref, name, true) }

// Reject rejects the pending approval request name of a run; see Approve.
func (e *Env) Reject(ref, name string) { e.decide(ref, name, false) }

func (e *Env) decide(ref, name string, approve bool) {
	e.t.Helper()
	e.Settle()
	run := e.Get(ref)
	ctx, cancel := e.ctx()
	defer cancel()
	list, err := e.c.Approvals(ctx, trellis.ApprovalFilter{Run: run.ID, Statuses: []trellis.ApprovalStatus{trellis.ApprovalPending}, Limit: 1000})
	if err != nil {
		e.fatalf("listing approvals of %s: %v", ref, err)
	}
	for _, a := range list.Approvals {
		if a.Name != name {
			continue
		}
		decide := e.c.Reject
		if approve {
			decide = e.c.Approve
		}
		if _, err := decide(ctx, a.ID, "trellistest", ""); err != nil {
			e.fatalf("deciding approval %q of %s: %v", name, ref, err)
		}
		e.Settle()
		return
	}
	e.fatalf("run %s has no pending approval request %q (it is %s: %s)", run.ID, name, run.Status, run.WaitReason)
}

// History returns a run's ops in position order; an error fails the test.
func (e *Env) History(ref string) []*trellis.Op {
	e.t.Helper()
	ctx, cancel := e.ctx()
	defer cancel()
	ops, err := e.c.History(ctx, ref)
	if err != nil {
		e.fatalf("reading the history of %s: %v", ref, err)
	}
	return ops
}

// ExportHistory returns a run's history in the trellis.history/v1 format, as
// Replay takes it; an error fails the test.
func (e *Env) ExportHistory(ref string) *trellis.RecordedHistory {
	e.t.Helper()
	ctx, cancel := e.ctx()
	defer cancel()
	h, err := e.c.ExportHistory(ctx, ref)
	if err != nil {
		e.fatalf("exporting the history of %s: %v", ref, err)
	}
	return h
}
