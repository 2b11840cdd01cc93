package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// Attempts that ended without their worker: a claim that takes back a run
// whose lease expired records the step attempt the lease's last heartbeat
// reported as lost (or timed out, past its timeout plus the grace), unless it
// completed; a heartbeat whose step ran past its timeout plus the grace ends
// the lease at once.
var endedAttemptCases = []testCase{
	{"LostFirstAttempt", endedLostFirst},
	{"LostAfterFailed", endedLostAfterFailed},
	{"CompletedNotRecorded", endedCompleted},
	{"StartedReplaced", endedStartedReplaced},
	{"OtherOpAtPosition", endedOtherOp},
	{"OnlyThatLease", endedOnlyThatLease},
	{"ExtendEndsTimedOut", endedExtendTimedOut},
	{"ExtendEndsTimedOutAlone", endedExtendTimedOutAlone},
	{"HeartbeatStoppedPastDeadline", endedHeartbeatStopped},
	{"NoTimeoutNeverEnded", endedNoTimeout},
	{"BadGrace", endedBadGrace},
}

// remote reports whether the worker role is played by a remote client.
func (e *env) remote() bool {
	_, ok := e.st.(*viaWorker)
	return ok
}

// report sends one heartbeat of cr's lease reporting step, for d.
func (e *env) report(cr *store.ClaimedRun, d time.Duration, step store.RunStep, grace time.Duration) *store.LeasesExtendResult {
	e.t.Helper()
	res, err := e.st.LeasesExtend(e.ctx, &store.LeasesExtendParams{Duration: d, Leases: []store.Lease{cr.Lease()},
		Steps: []store.RunStep{step}, StepTimeoutGrace: grace})
	if err != nil {
		e.t.Fatalf("LeasesExtend: %v", err)
	}
	return res
}

// reclaim lets cr's lease expire and claims its run again, returning the claim
// and what it recorded.
func (e *env) reclaim(cr *store.ClaimedRun, opts ...claimOpt) (*store.ClaimedRun, []store.EndedAttemptInfo) {
	e.t.Helper()
	e.clk.Advance(leaseDur + time.Second)
	res := e.claim(append([]claimOpt{claimBy("worker-2")}, opts...)...)
	var got *store.ClaimedRun
	for _, c := range res.Runs {
		if c.Run.ID == cr.Run.ID {
			got = c
		}
	}
	if got == nil {
		e.t.Fatalf("claim after the lease expired = %v, want %s among them", claimedIDs(res.Runs), cr.Run.ID)
	}
	var ended []store.EndedAttemptInfo
	for _, a := range res.EndedAttempts {
		if a.RunID == cr.Run.ID {
			ended = append(ended, a)
		}
	}
	return got, ended
}

// wantEnded checks the step at pos in the claim's history: not done, Attempts
// n, its last attempt row numbered n with outcome, and ended reporting it.
func wantEnded(t *testing.T, viaRemote bool, cr *store.ClaimedRun, ended []store.EndedAttemptInfo, pos, n int, outcome string) *store.Op {
	t.Helper()
	var op *store.Op
	for _, o := range cr.History {
		if o.Position == pos {
			op = o
		}
	}
	if op == nil || op.Kind != store.OpStep || op.Done || op.Attempts != n || len(op.AttemptLog) == 0 {
		t.Fatalf("op %d after the claim = %+v, want a step not done with %d attempts and a log", pos, op, n)
	}
	last := op.AttemptLog[len(op.AttemptLog)-1]
	if last.Attempt != n || last.Outcome != outcome || last.Error.Message == "" || last.FinishedAt.Before(last.StartedAt) {
		t.Fatalf("last attempt of op %d = %+v, want attempt %d %s with an error", pos, last, n, outcome)
	}
	want := store.ErrorTypeAttemptLost
	if outcome == store.AttemptTimedOut {
		want = store.ErrorTypeStepTimeout
	}
	if last.Error.Type != want {
		t.Fatalf("error type of the %s attempt = %q, want %q", outcome, last.Error.Type, want)
	}
	if ended == nil && viaRemote {
		return op // a remote worker's claim does not carry them (server metrics count them)
	}
	if len(ended) != 1 || ended[0].RunID != cr.Run.ID || ended[0].Position != pos || ended[0].Attempt != n ||
		ended[0].Outcome != outcome || ended[0].Workflow != cr.Run.Workflow || ended[0].Namespace != ns {
		t.Fatalf("EndedAttempts = %+v, want attempt %d of op %d of %s %s", ended, n, pos, cr.Run.ID, outcome)
	}
	return op
}

// A step's first attempt, reported running, whose worker went away: the claim
// writes its op and its attempt as lost; the HistoryList shows it too.
func endedLostFirst(t *testing.T, e *env) {
	cr := e.start()
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{e.doneStep(0, "reserve", `1`)}})
	since := e.clk.Now().UTC()
	e.report(cr, leaseDur, store.RunStep{Name: "charge", Attempt: 1, Since: since, Position: 1}, 0)
	again, ended := e.reclaim(cr)
	op := wantEnded(t, e.remote(), again, ended, 1, 1, store.AttemptLost)
	if op.Name != "charge" || !op.StartedAt.Equal(since) || !op.AttemptLog[0].StartedAt.Equal(since) {
		t.Fatalf("op = %+v, want step charge started at %v", op, since)
	}
	h := e.history(cr.Run.ID)
	if len(h) != 2 || len(h[1].AttemptLog) != 1 || h[1].AttemptLog[0].Outcome != store.AttemptLost {
		t.Fatalf("HistoryList = %+v, want the lost attempt", h)
	}
	// The old lease is fenced; the new one writes the step's next attempt.
	_, err := e.st.Checkpoint(e.ctx, &store.CheckpointParams{Lease: cr.Lease(), Status: store.StatusRunning,
		Ops: []*store.Op{e.doneStep(1, "charge", `2`)}})
	wantErr(t, "Checkpoint of the old lease", err, store.ErrLeaseLost)
	done := e.doneStep(1, "charge", `2`)
	done.Attempts = 2
	e.checkpoint(again, store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{done}})
	if h := e.history(cr.Run.ID); !h[1].Done || h[1].Attempts != 2 || len(h[1].AttemptLog) != 1 {
		t.Fatalf("step after its second attempt = %+v, want done at 2 with the lost attempt logged", h[1])
	}
}

// A step that failed its first attempt and lost its second.
func endedLostAfterFailed(t *testing.T, e *env) {
	cr := e.start()
	t0 := e.clk.Now()
	op := &store.Op{Position: 0, Kind: store.OpStep, Name: "charge", Attempts: 1, StartedAt: t0}
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{op},
		Attempts: []store.Attempt{{Position: 0, Attempt: 1, Error: store.ErrorInfo{Message: "503"}, StartedAt: t0, FinishedAt: t0}}})
	e.report(cr, leaseDur, store.RunStep{Name: "charge", Attempt: 2, Since: e.clk.Now(), Position: 0}, 0)
	again, ended := e.reclaim(cr)
	got := wantEnded(t, e.remote(), again, ended, 0, 2, store.AttemptLost)
	if len(got.AttemptLog) != 2 || got.AttemptLog[0].Outcome != store.AttemptFailed || !got.StartedAt.Equal(t0) {
		t.Fatalf("step = %+v, want its failed then its lost attempt, started at %v", got, t0)
	}
}

// A step attempt that completed (done, or failed and recorded) before the
// lease expired is not recorded again, however stale the heartbeat's report.
func endedCompleted(t *testing.T, e *env) {
	for _, c := range []struct {
		name string
		ck   func(*store.ClaimedRun) store.CheckpointParams
	}{
		{"done", func(*store.ClaimedRun) store.CheckpointParams {
			return store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{e.doneStep(0, "charge", `1`)}}
		}},
		{"failed", func(*store.ClaimedRun) store.CheckpointParams {
			t0 := e.clk.Now()
			return store.CheckpointParams{Status: store.StatusRunning,
				Ops:      []*store.Op{{Position: 0, Kind: store.OpStep, Name: "charge", Attempts: 1, StartedAt: t0}},
				Attempts: []store.Attempt{{Position: 0, Attempt: 1, Error: store.ErrorInfo{Message: "503"}, StartedAt: t0, FinishedAt: t0}}}
		}},
	} {
		cr := e.start()
		e.report(cr, leaseDur, store.RunStep{Name: "charge", Attempt: 1, Since: e.clk.Now(), Position: 0}, 0)
		e.checkpoint(cr, c.ck(cr))
		again, ended := e.reclaim(cr)
		if len(ended) != 0 || len(again.History) != 1 || again.History[0].Attempts != 1 {
			t.Fatalf("%s: ended %+v, history %+v; want nothing recorded", c.name, ended, again.History)
		}
		if n := len(again.History[0].AttemptLog); (c.name == "done") != (n == 0) {
			t.Fatalf("%s: attempt log %+v", c.name, again.History[0].AttemptLog)
		}
	}
}

// A reported step whose position holds another op (another step's, or a
// heartbeat of a worker that sends no position, read as 0) is not recorded.
func endedOtherOp(t *testing.T, e *env) {
	cr := e.start()
	t0 := e.clk.Now()
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning,
		Ops:      []*store.Op{{Position: 0, Kind: store.OpStep, Name: "reserve", Attempts: 1, StartedAt: t0}},
		Attempts: []store.Attempt{{Position: 0, Attempt: 1, Error: store.ErrorInfo{Message: "503"}, StartedAt: t0, FinishedAt: t0}}})
	e.report(cr, leaseDur, store.RunStep{Name: "charge", Attempt: 2, Since: t0}, 0)
	again, ended := e.reclaim(cr)
	if len(ended) != 0 || len(again.History) != 1 || again.History[0].Attempts != 1 || len(again.History[0].AttemptLog) != 1 {
		t.Fatalf("ended %+v, history %+v; want nothing recorded for another step's position", ended, again.History)
	}
}

// A started row (an at-most-once step's record of its attempt's start) is
// replaced by the lost attempt, even when the op counts the attempt.
func endedStartedReplaced(t *testing.T, e *env) {
	cr := e.start()
	t0 := e.clk.Now()
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning,
		Ops:      []*store.Op{{Position: 0, Kind: store.OpStep, Name: "pay", Attempts: 1, StartedAt: t0}},
		Attempts: []store.Attempt{{Position: 0, Attempt: 1, StartedAt: t0, FinishedAt: t0, Outcome: store.AttemptStarted}}})
	e.report(cr, leaseDur, store.RunStep{Name: "pay", Attempt: 1, Since: t0, Position: 0}, 0)
	again, ended := e.reclaim(cr)
	got := wantEnded(t, e.remote(), again, ended, 0, 1, store.AttemptLost)
	if len(got.AttemptLog) != 1 {
		t.Fatalf("attempt log = %+v, want the started row replaced", got.AttemptLog)
	}
}

// Only the step reported under the lease that expired counts: a run whose
// lease's heartbeats reported no step, or that was handed back with a step
// reported, records nothing.
func endedOnlyThatLease(t *testing.T, e *env) {
	cr := e.start()
	e.report(cr, leaseDur, store.RunStep{Name: "charge", Attempt: 1, Since: e.clk.Now()}, 0)
	e.extend(leaseDur, cr) // no step running now
	if _, ended := e.reclaim(cr); len(ended) != 0 {
		t.Fatalf("ended = %+v after a heartbeat with no step, want none", ended)
	}
	// A run handed back (pending) by its worker with its step reported, then
	// claimed and its new lease expired without a heartbeat: nothing.
	cr2 := e.start()
	e.report(cr2, leaseDur, store.RunStep{Name: "charge", Attempt: 1, Since: e.clk.Now()}, 0)
	e.checkpoint(cr2, store.CheckpointParams{Status: store.StatusPending})
	next := e.claimOne(cr2.Run.ID)
	if _, ended := e.reclaim(next); len(ended) != 0 {
		t.Fatalf("ended = %+v for a lease that reported no step, want none", ended)
	}
}

// A heartbeat whose step ran past its timeout plus the grace does not extend
// the lease: it ends it (the run is claimable at once, nothing else is) and
// reports it lost; the claim records the attempt timed out, and the hung
// worker's writes are fenced.
func endedExtendTimedOut(t *testing.T, e *env) {
	cr, other := e.start(), e.start()
	grace := store.DefaultStepTimeoutGrace // what a server uses, whatever its workers send
	since := e.clk.Now()
	step := store.RunStep{Name: "hang", Attempt: 1, Since: since, Position: 0, Timeout: 5 * time.Second}
	// Within the timeout plus the grace: extended.
	e.clk.Advance(5*time.Second + grace - time.Second)
	if res := e.report(cr, leaseDur, step, 0); len(res.Lost) != 0 {
		t.Fatalf("LeasesExtend within the grace = %+v, want the lease kept", res)
	}
	e.extend(leaseDur, other)
	e.clk.Advance(time.Second)
	res, err := e.st.LeasesExtend(e.ctx, &store.LeasesExtendParams{Duration: leaseDur,
		Leases: []store.Lease{cr.Lease(), other.Lease()}, Steps: []store.RunStep{step, {}}})
	if err != nil {
		t.Fatalf("LeasesExtend: %v", err)
	}
	if len(res.Lost) != 1 || res.Lost[0] != cr.Run.ID {
		t.Fatalf("LeasesExtend past the timeout plus the grace = %+v, want %s lost and the other kept", res, cr.Run.ID)
	}
	// Claimable now, without waiting for the lease: the other run is not.
	c := e.claim(claimBy("worker-2"))
	if len(c.Runs) != 1 || c.Runs[0].Run.ID != cr.Run.ID {
		t.Fatalf("claim after the lease was ended = %v, want [%s]", claimedIDs(c.Runs), cr.Run.ID)
	}
	op := wantEnded(t, e.remote(), c.Runs[0], c.EndedAttempts, 0, 1, store.AttemptTimedOut)
	if !op.AttemptLog[0].StartedAt.Equal(since) {
		t.Fatalf("timed-out attempt = %+v, want it started at %v", op.AttemptLog[0], since)
	}
	// The hung worker is fenced: its heartbeat and its checkpoint fail.
	if res := e.extend(leaseDur, cr); len(res.Lost) != 1 {
		t.Fatalf("heartbeat of the hung worker = %+v, want its lease lost", res)
	}
	_, err = e.st.Checkpoint(e.ctx, &store.CheckpointParams{Lease: cr.Lease(), Status: store.StatusRunning,
		Ops: []*store.Op{e.doneStep(0, "hang", `1`)}})
	wantErr(t, "Checkpoint of the hung worker", err, store.ErrLeaseLost)
	if res := e.extend(leaseDur, other); len(res.Lost) != 0 {
		t.Fatalf("heartbeat of the other run = %+v, want its lease held", res)
	}
}

// A heartbeat of the hung run's lease alone (the last lease of its call, as a
// worker holding that one run sends it) ends the lease and commits: on SQLite
// with the cgo driver, the statement that ended it was left in progress, and
// the heartbeat's transaction failed to commit, every time.
func endedExtendTimedOutAlone(t *testing.T, e *env) {
	cr := e.start()
	step := store.RunStep{Name: "hang", Attempt: 1, Since: e.clk.Now(), Timeout: time.Second}
	e.clk.Advance(time.Second + store.DefaultStepTimeoutGrace + time.Second)
	if res := e.report(cr, leaseDur, step, 0); len(res.Lost) != 1 || res.Lost[0] != cr.Run.ID {
		t.Fatalf("LeasesExtend past the timeout plus the grace = %+v, want %s lost", res, cr.Run.ID)
	}
	c := e.claim(claimBy("worker-2"))
	if len(c.Runs) != 1 || c.Runs[0].Run.ID != cr.Run.ID {
		t.Fatalf("claim after the lease was ended = %v, want [%s]", claimedIDs(c.Runs), cr.Run.ID)
	}
	wantEnded(t, e.remote(), c.Runs[0], c.EndedAttempts, 0, 1, store.AttemptTimedOut)
}

// A worker that stopped heartbeating while its step ran: the claim after its
// lease expired records the attempt timed out when its timeout plus the grace
// had passed by then, lost otherwise.
func endedHeartbeatStopped(t *testing.T, e *env) {
	cr := e.start()
	timeout := leaseDur - store.DefaultStepTimeoutGrace // past with its grace when the lease expires
	e.report(cr, leaseDur, store.RunStep{Name: "s", Attempt: 1, Since: e.clk.Now(), Timeout: timeout}, 0)
	again, ended := e.reclaim(cr)
	wantEnded(t, e.remote(), again, ended, 0, 1, store.AttemptTimedOut)
	cr2 := e.start()
	e.report(cr2, leaseDur, store.RunStep{Name: "s", Attempt: 1, Since: e.clk.Now(), Timeout: time.Hour}, 0)
	again, ended = e.reclaim(cr2)
	wantEnded(t, e.remote(), again, ended, 0, 1, store.AttemptLost)
}

// A step without a timeout is never ended by a heartbeat, however long it runs.
func endedNoTimeout(t *testing.T, e *env) {
	cr := e.start()
	step := store.RunStep{Name: "long", Attempt: 1, Since: e.clk.Now()}
	for range 5 {
		e.clk.Advance(leaseDur / 2)
		if res := e.report(cr, leaseDur, step, time.Nanosecond); len(res.Lost) != 0 {
			t.Fatalf("LeasesExtend of a step without timeout = %+v, want the lease kept", res)
		}
	}
	e.wantNoClaim(claimBy("worker-2"))
}

// A negative grace is refused and changes nothing.
func endedBadGrace(t *testing.T, e *env) {
	if e.remote() {
		t.Skip("the grace is the server's: a remote worker sends none")
	}
	cr := e.start()
	before := e.get(cr.Run.ID)
	_, err := e.st.LeasesExtend(e.ctx, &store.LeasesExtendParams{Duration: time.Hour, Leases: []store.Lease{cr.Lease()},
		StepTimeoutGrace: -time.Second})
	if !errors.Is(err, store.ErrInvalidParams) {
		t.Fatalf("LeasesExtend with a negative grace: %v, want ErrInvalidParams", err)
	}
	if after := e.get(cr.Run.ID); !after.LeaseExpiresAt.Equal(*before.LeaseExpiresAt) {
		t.Fatalf("a refused extend moved the lease: %v -> %v", before.LeaseExpiresAt, after.LeaseExpiresAt)
	}
	_, err = e.st.RunsClaim(e.ctx, claimParams(func(p *store.RunsClaimParams) { p.StepTimeoutGrace = -1 }))
	if !errors.Is(err, store.ErrInvalidParams) {
		t.Fatalf("RunsClaim with a negative grace: %v, want ErrInvalidParams", err)
	}
}
