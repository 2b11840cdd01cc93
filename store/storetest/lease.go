package storetest

import (
	"errors"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

var leaseCases = []testCase{
	{"ExtendLive", leaseExtendLive},
	{"ExtendStale", leaseExtendStale},
	{"ExtendFinished", leaseExtendFinished},
	{"ExtendReportsCancel", leaseExtendCancel},
	{"Release", leaseRelease},
	{"ReleaseStale", leaseReleaseStale},
	{"ExtendReportsStep", leaseExtendStep},
	{"ExtendStepsBadInput", leaseExtendStepsBad},
}

func (e *env) extend(d time.Duration, crs ...*store.ClaimedRun) *store.LeasesExtendResult {
	e.t.Helper()
	p := &store.LeasesExtendParams{Duration: d}
	for _, cr := range crs {
		p.Leases = append(p.Leases, cr.Lease())
	}
	res, err := e.st.LeasesExtend(e.ctx, p)
	if err != nil {
		e.t.Fatalf("LeasesExtend: %v", err)
	}
	return res
}

func leaseExtendLive(t *testing.T, e *env) {
	cr := e.start()
	now := e.clk.Advance(20 * time.Second)
	res := e.extend(time.Minute, cr)
	if len(res.Lost) != 0 || len(res.CancelRequested) != 0 {
		t.Fatalf("LeasesExtend of a live lease = %+v, want nothing lost or cancelled", res)
	}
	r := e.get(cr.Run.ID)
	wantTimePtr(t, "LeaseExpiresAt after extend", r.LeaseExpiresAt, now.Add(time.Minute))
	e.clk.Advance(leaseDur) // past the original expiry, before the new one
	e.wantNoClaim(claimBy("worker-2"))
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning})
	if r := e.wantStatus(cr.Run.ID, store.StatusRunning); r.LeaseOwner != worker {
		t.Fatalf("lease owner = %q, want %s", r.LeaseOwner, worker)
	}
}

func leaseExtendStale(t *testing.T, e *env) {
	stale := e.start()
	e.clk.Advance(leaseDur)
	fresh := e.claimOne(stale.Run.ID, claimBy("worker-2"))
	other := e.start()
	res := e.extend(time.Hour, stale, other)
	wantIDs(t, "Lost", res.Lost, []string{stale.Run.ID})
	if len(res.CancelRequested) != 0 {
		t.Fatalf("CancelRequested = %v, want none", res.CancelRequested)
	}
	r := e.get(stale.Run.ID)
	if r.LeaseOwner != "worker-2" {
		t.Fatalf("lease owner = %q, want worker-2", r.LeaseOwner)
	}
	wantTimePtr(t, "new holder's LeaseExpiresAt", r.LeaseExpiresAt, fresh.LeaseExpiresAt)
	wantTimePtr(t, "extended lease", e.get(other.Run.ID).LeaseExpiresAt, e.clk.Now().Add(time.Hour))
}

func leaseExtendFinished(t *testing.T, e *env) {
	cr := e.start()
	e.finish(cr)
	res := e.extend(time.Minute, cr)
	wantIDs(t, "Lost after the run finished", res.Lost, []string{cr.Run.ID})
	if r := e.wantStatus(cr.Run.ID, store.StatusSucceeded); r.LeaseExpiresAt != nil && r.LeaseExpiresAt.After(e.clk.Now()) {
		t.Fatalf("finished run has a live lease until %v", *r.LeaseExpiresAt)
	}
}

func leaseExtendCancel(t *testing.T, e *env) {
	a, b := e.start(), e.start()
	if _, err := e.st.RunCancel(e.ctx, &store.RunCancelParams{Namespace: ns, Ref: b.Run.ID}); err != nil {
		t.Fatalf("RunCancel: %v", err)
	}
	now := e.clk.Now()
	res := e.extend(time.Minute, a, b)
	wantIDs(t, "CancelRequested", res.CancelRequested, []string{b.Run.ID})
	if len(res.Lost) != 0 {
		t.Fatalf("Lost = %v, want none", res.Lost)
	}
	wantTimePtr(t, "cancelled run's lease", e.get(b.Run.ID).LeaseExpiresAt, now.Add(time.Minute))
}

func leaseRelease(t *testing.T, e *env) {
	cr := e.start()
	now := e.clk.Advance(time.Second)
	if err := e.st.LeaseRelease(e.ctx, &store.LeaseReleaseParams{Lease: cr.Lease()}); err != nil {
		t.Fatalf("LeaseRelease: %v", err)
	}
	r := e.wantStatus(cr.Run.ID, store.StatusPending)
	wantTime(t, "AvailableAt after release", r.AvailableAt, now)
	again := e.claimOne(cr.Run.ID, claimBy("worker-2"))
	if again.LeaseToken <= cr.LeaseToken {
		t.Fatalf("token after release = %d, want > %d", again.LeaseToken, cr.LeaseToken)
	}
	err := e.checkpointErr(cr, store.CheckpointParams{Status: store.StatusRunning})
	wantErr(t, "Checkpoint with the released token", err, store.ErrLeaseLost)
}

func leaseReleaseStale(t *testing.T, e *env) {
	stale := e.start()
	e.clk.Advance(leaseDur)
	fresh := e.claimOne(stale.Run.ID, claimBy("worker-2"))
	err := e.st.LeaseRelease(e.ctx, &store.LeaseReleaseParams{Lease: stale.Lease()})
	wantErr(t, "LeaseRelease with a stale token", err, store.ErrLeaseLost)
	if r := e.wantStatus(stale.Run.ID, store.StatusRunning); r.LeaseOwner != "worker-2" {
		t.Fatalf("lease owner = %q, want worker-2", r.LeaseOwner)
	}
	e.wantNoClaim()
	e.checkpoint(fresh, store.CheckpointParams{Status: store.StatusRunning})
}

// leaseExtendStep: the step a heartbeat reports is the run's CurrentStep while
// that lease holds it; a heartbeat with none clears it, another lease of the
// run does not show it, and a finished run has none.
func leaseExtendStep(t *testing.T, e *env) {
	cr, other := e.start(), e.start()
	if r := e.get(cr.Run.ID); r.CurrentStep != nil {
		t.Fatalf("CurrentStep of a new claim = %+v, want none", r.CurrentStep)
	}
	since := e.clk.Now().Add(-time.Second).UTC()
	step := store.RunStep{Name: "charge", Attempt: 2, Since: since, Position: 3, Timeout: 90 * time.Second}
	p := &store.LeasesExtendParams{Duration: time.Minute, Leases: []store.Lease{cr.Lease(), other.Lease()},
		Steps: []store.RunStep{step, {}}}
	if _, err := e.st.LeasesExtend(e.ctx, p); err != nil {
		t.Fatalf("LeasesExtend with steps: %v", err)
	}
	got := e.get(cr.Run.ID).CurrentStep
	if got == nil || got.Name != "charge" || got.Attempt != 2 || !got.Since.Equal(since) || got.Position != 3 ||
		got.Timeout != 90*time.Second {
		t.Fatalf("CurrentStep = %+v, want %+v", got, step)
	}
	if s := e.get(other.Run.ID).CurrentStep; s != nil {
		t.Fatalf("CurrentStep of a run reported idle = %+v, want none", s)
	}
	if runs := e.runsGet(store.RunsGetParams{Namespace: ns, IDs: []string{cr.Run.ID}}); runs[cr.Run.ID].CurrentStep == nil {
		t.Fatalf("RunsGet: CurrentStep missing")
	}
	// A heartbeat without steps: none running.
	e.extend(time.Minute, cr)
	if s := e.get(cr.Run.ID).CurrentStep; s != nil {
		t.Fatalf("CurrentStep after a heartbeat with no step = %+v, want none", s)
	}
	// Reported again, then the lease expires and another worker claims the run:
	// its predecessor's step is not shown.
	if _, err := e.st.LeasesExtend(e.ctx, &store.LeasesExtendParams{Duration: leaseDur,
		Leases: []store.Lease{cr.Lease()}, Steps: []store.RunStep{step}}); err != nil {
		t.Fatalf("LeasesExtend: %v", err)
	}
	e.clk.Advance(leaseDur + time.Second)
	e.claimOne(cr.Run.ID, claimBy("worker-2"))
	if s := e.get(cr.Run.ID).CurrentStep; s != nil {
		t.Fatalf("CurrentStep under a new lease = %+v, want none", s)
	}
	// A finished run has none.
	if _, err := e.st.LeasesExtend(e.ctx, &store.LeasesExtendParams{Duration: time.Minute,
		Leases: []store.Lease{other.Lease()}, Steps: []store.RunStep{step}}); err != nil {
		t.Fatalf("LeasesExtend: %v", err)
	}
	e.finish(other)
	if s := e.get(other.Run.ID).CurrentStep; s != nil {
		t.Fatalf("CurrentStep of a finished run = %+v, want none", s)
	}
}

func leaseExtendStepsBad(t *testing.T, e *env) {
	cr := e.start()
	before := e.get(cr.Run.ID)
	for name, steps := range map[string][]store.RunStep{
		"more steps than leases":  {{Name: "a", Attempt: 1}, {Name: "b", Attempt: 1}},
		"a name without attempt":  {{Name: "a"}},
		"an attempt without name": {{Attempt: 1}},
		"a negative attempt":      {{Name: "a", Attempt: -1}},
		"a name too long":         {{Name: string(make([]byte, store.MaxNameLen+1)), Attempt: 1}},
		"a negative position":     {{Name: "a", Attempt: 1, Position: -1}},
		"a negative timeout":      {{Name: "a", Attempt: 1, Timeout: -time.Second}},
	} {
		_, err := e.st.LeasesExtend(e.ctx, &store.LeasesExtendParams{Duration: time.Hour,
			Leases: []store.Lease{cr.Lease()}, Steps: steps})
		if !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("LeasesExtend with %s: %v, want ErrInvalidParams", name, err)
		}
	}
	after := e.get(cr.Run.ID)
	if !after.LeaseExpiresAt.Equal(*before.LeaseExpiresAt) || after.CurrentStep != nil {
		t.Fatalf("refused extends changed the run: lease %v -> %v, step %+v", before.LeaseExpiresAt, after.LeaseExpiresAt, after.CurrentStep)
	}
}
