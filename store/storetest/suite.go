// Package storetest is the conformance suite of the storage contract: every driver of
// store.Store (SQLite, Postgres, the remote-worker client) runs it unchanged from its
// own tests:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
//			s, err := mydriver.Open(ctx, mydriver.Config{Now: now})
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { s.Close() })
//			return s
//		})
//	}
//
// The suite owns the clock: every store it asks for reads time from a fake Clock that
// starts at a fixed instant and moves only when a case advances it, so expiries, wake-ups
// and claim order are tested without sleeping. Readings are whole microseconds, and
// times read back are compared within a millisecond, so a driver that stores
// microseconds (Postgres) passes as well as one that stores nanoseconds.
//
// One file per area of the contract; a change to the contract adds a case here first.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// Run runs every conformance test against stores made by newStore. newStore must return
// a fresh, empty store whose clock is now (a controllable fake clock owned by the suite),
// and register its own cleanup (Close) with t.Cleanup.
func Run(t *testing.T, newStore func(t *testing.T, now func() time.Time) store.Store) {
	s := &suite{newStore: newStore}
	areas := []struct {
		name  string
		cases []testCase
	}{
		{"Create", createCases},
		{"Seed", seedCases},
		{"Get", getCases},
		{"GetMany", getManyCases},
		{"Claim", claimCases},
		{"Lease", leaseCases},
		{"LeaseGuard", leaseGuardCases},
		{"Checkpoint", checkpointCases},
		{"Cancel", cancelCases},
		{"CancelWait", cancelWaitCases},
		{"Resume", resumeCases},
		{"List", listCases},
		{"History", historyCases},
		{"Notify", notifyCases},
		{"Events", eventCases},
		{"Children", childCases},
		{"Approvals", approvalCases},
		{"Workers", workerCases},
		{"Tokens", tokenCases},
		{"TokenLife", tokenLifeCases},
		{"Keys", keyCases},
		{"Audit", auditCases},
		{"Idempotency", idempotencyCases},
		{"Sessions", sessionCases},
		{"Tx", txCases},
		{"Queues", queueCases},
		{"Stream", streamCases},
		{"Schedules", scheduleCases},
		{"Batch", batchCases},
		{"Retention", retentionCases},
		{"WorkflowID", workflowIDCases},
		{"EndedAttempts", endedAttemptCases},
		{"Versions", versionCases},
		{"Payloads", payloadCases},
		{"WorkflowRetry", workflowRetryCases},
		{"Lifecycle", lifecycleCases},
	}
	for _, a := range areas {
		t.Run(a.name, func(t *testing.T) {
			t.Parallel()
			for _, c := range a.cases {
				t.Run(c.name, func(t *testing.T) {
					t.Parallel()
					c.fn(t, s.setup(t))
				})
			}
		})
	}
}

// testCase is one conformance case; it gets a fresh store and clock.
type testCase struct {
	name string
	fn   func(t *testing.T, e *env)
}

type suite struct {
	newStore func(t *testing.T, now func() time.Time) store.Store
}

// Defaults of the runs and claims the cases make.
const (
	ns       = "ns"
	wf       = "wf"
	queue    = "default"
	worker   = "worker-1"
	leaseDur = 30 * time.Second
	// signalTimeout bounds every wait for a notification.
	signalTimeout = 5 * time.Second
	// timeTolerance is how far a time read back may be from the one expected.
	timeTolerance = time.Millisecond
)

// epoch is where every case's clock starts: a fixed instant with a microsecond part.
var epoch = time.Date(2030, 1, 2, 3, 4, 5, 678901000, time.UTC)

// env is one case's fixture: a fresh store, its clock, and helpers that fail the test
// on unexpected errors. Its helpers must be called from the test's goroutine.
type env struct {
	t   *testing.T
	ctx context.Context
	st  store.Store
	clk *Clock
	ids atomic.Int64
}

// setup returns a fresh, empty store reading time from a new fake clock.
func (s *suite) setup(t *testing.T) *env {
	t.Helper()
	clk := NewClock(epoch)
	st := s.newStore(t, clk.Now)
	if st == nil {
		t.Fatal("newStore returned a nil store")
	}
	return &env{t: t, ctx: t.Context(), st: st, clk: clk}
}

// newID returns an ID unique within the case.
func (e *env) newID(prefix string) string {
	return fmt.Sprintf("%s-%d", prefix, e.ids.Add(1))
}

// runOpt changes the parameters of a run to create.
type runOpt func(*store.RunCreateParams)

func withWorkflowID(id string) runOpt { return func(p *store.RunCreateParams) { p.WorkflowID = id } }
func withWorkflow(name string) runOpt { return func(p *store.RunCreateParams) { p.Workflow = name } }
func withQueue(q string) runOpt       { return func(p *store.RunCreateParams) { p.Queue = q } }
func withNamespace(n string) runOpt   { return func(p *store.RunCreateParams) { p.Namespace = n } }
func withPriority(n int) runOpt       { return func(p *store.RunCreateParams) { p.Priority = n } }
func withID(id string) runOpt         { return func(p *store.RunCreateParams) { p.ID = id } }
func withAvailableAt(t time.Time) runOpt {
	return func(p *store.RunCreateParams) { p.AvailableAt = &t }
}
func withReuse(r store.ReusePolicy) runOpt {
	return func(p *store.RunCreateParams) { p.Reuse = r }
}

// params returns the parameters of a new run with a unique ID and workflow ID, in
// namespace ns, workflow wf and queue "default", changed by opts.
func (e *env) params(opts ...runOpt) *store.RunCreateParams {
	id := e.newID("run")
	p := &store.RunCreateParams{Namespace: ns, ID: id, WorkflowID: "wfid-" + id, Workflow: wf, Queue: queue}
	for _, o := range opts {
		o(p)
	}
	return p
}

// create creates a run and fails unless it was created.
func (e *env) create(opts ...runOpt) *store.Run {
	e.t.Helper()
	p := e.params(opts...)
	res, err := e.st.RunCreate(e.ctx, p)
	if err != nil {
		e.t.Fatalf("RunCreate(%s): %v", p.ID, err)
	}
	if !res.Created || res.Run == nil || res.Run.ID != p.ID {
		e.t.Fatalf("RunCreate(%s) = %+v, want the new run created", p.ID, res)
	}
	return res.Run
}

// get returns the run ref of namespace ns.
func (e *env) get(ref string) *store.Run {
	e.t.Helper()
	return e.getIn(ns, ref)
}

func (e *env) getIn(namespace, ref string) *store.Run {
	e.t.Helper()
	r, err := e.st.RunGet(e.ctx, &store.RunGetParams{Namespace: namespace, Ref: ref})
	if err != nil {
		e.t.Fatalf("RunGet(%s/%s): %v", namespace, ref, err)
	}
	return r
}

// claimOpt changes the parameters of a claim.
type claimOpt func(*store.RunsClaimParams)

func claimMax(n int) claimOpt { return func(p *store.RunsClaimParams) { p.Max = n } }
func claimWorkflows(names ...string) claimOpt {
	return func(p *store.RunsClaimParams) { p.Workflows = names }
}
func claimIn(namespace string) claimOpt {
	return func(p *store.RunsClaimParams) { p.Namespace = namespace }
}
func claimBy(w string) claimOpt {
	return func(p *store.RunsClaimParams) { p.Worker = w }
}

// claimParams returns the parameters of a claim of up to 100 runs of workflow wf in
// namespace ns by worker-1 for leaseDur, changed by opts.
func claimParams(opts ...claimOpt) *store.RunsClaimParams {
	p := &store.RunsClaimParams{Namespace: ns, Workflows: []string{wf}, Worker: worker, Max: 100, LeaseDuration: leaseDur}
	for _, o := range opts {
		o(p)
	}
	return p
}

func (e *env) claim(opts ...claimOpt) *store.RunsClaimResult {
	e.t.Helper()
	res, err := e.st.RunsClaim(e.ctx, claimParams(opts...))
	if err != nil {
		e.t.Fatalf("RunsClaim: %v", err)
	}
	return res
}

// claimIDs claims and returns the IDs of the runs claimed, in the order returned.
func (e *env) claimIDs(opts ...claimOpt) []string {
	e.t.Helper()
	return claimedIDs(e.claim(opts...).Runs)
}

func claimedIDs(crs []*store.ClaimedRun) []string {
	ids := make([]string, 0, len(crs))
	for _, cr := range crs {
		ids = append(ids, cr.Run.ID)
	}
	return ids
}

// claimOne claims one run and fails unless it is runID.
func (e *env) claimOne(runID string, opts ...claimOpt) *store.ClaimedRun {
	e.t.Helper()
	res := e.claim(append([]claimOpt{claimMax(1)}, opts...)...)
	if len(res.Runs) != 1 || res.Runs[0].Run.ID != runID {
		e.t.Fatalf("RunsClaim(max 1) claimed %v, want [%s]", claimedIDs(res.Runs), runID)
	}
	return res.Runs[0]
}

// wantNoClaim fails if a claim finds any run.
func (e *env) wantNoClaim(opts ...claimOpt) {
	e.t.Helper()
	if ids := e.claimIDs(opts...); len(ids) != 0 {
		e.t.Fatalf("RunsClaim claimed %v, want nothing", ids)
	}
}

// start creates a run and claims it; no other run may be due.
func (e *env) start(opts ...runOpt) *store.ClaimedRun {
	e.t.Helper()
	r := e.create(opts...)
	return e.claimOne(r.ID)
}

// checkpoint checkpoints p under cr's lease and fails on error.
func (e *env) checkpoint(cr *store.ClaimedRun, p store.CheckpointParams) *store.CheckpointResult {
	e.t.Helper()
	p.Lease = cr.Lease()
	res, err := e.st.Checkpoint(e.ctx, &p)
	if err != nil {
		e.t.Fatalf("Checkpoint(%s, %s): %v", cr.Run.ID, p.Status, err)
	}
	return res
}

// checkpointErr checkpoints p under cr's lease and returns the error.
func (e *env) checkpointErr(cr *store.ClaimedRun, p store.CheckpointParams) error {
	p.Lease = cr.Lease()
	_, err := e.st.Checkpoint(e.ctx, &p)
	return err
}

// finish ends a claimed run succeeded.
func (e *env) finish(cr *store.ClaimedRun) {
	e.t.Helper()
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusSucceeded, Output: []byte(`"done"`)})
}

// block checkpoints a claimed run blocked.
func (e *env) block(cr *store.ClaimedRun) {
	e.t.Helper()
	e.checkpoint(cr, store.CheckpointParams{
		Status: store.StatusBlocked, WaitReason: "non_determinism",
		Error: &store.ErrorInfo{Message: "position 0: recorded step a, code asked for step b", Type: "non_determinism"},
	})
}

// history lists the history of run ref in namespace ns.
func (e *env) history(ref string) []*store.Op {
	e.t.Helper()
	ops, err := e.st.HistoryList(e.ctx, &store.HistoryListParams{Namespace: ns, Ref: ref})
	if err != nil {
		e.t.Fatalf("HistoryList(%s): %v", ref, err)
	}
	return ops
}

func (e *env) list(p store.RunListParams) *store.RunListResult {
	e.t.Helper()
	if p.Namespace == "" {
		p.Namespace = ns
	}
	res, err := e.st.RunList(e.ctx, &p)
	if err != nil {
		e.t.Fatalf("RunList(%+v): %v", p, err)
	}
	return res
}

// listIDs lists every run of namespace ns matching p, page after page.
func (e *env) listIDs(p store.RunListParams) []string {
	e.t.Helper()
	var ids []string
	for range 10000 {
		res := e.list(p)
		ids = append(ids, runIDs(res.Runs)...)
		if res.NextCursor == "" {
			return ids
		}
		p.Cursor = res.NextCursor
	}
	e.t.Fatal("RunList: cursor never ended")
	return nil
}

func runIDs(runs []*store.Run) []string {
	ids := make([]string, 0, len(runs))
	for _, r := range runs {
		ids = append(ids, r.ID)
	}
	return ids
}

// wantErr fails unless errors.Is(err, target).
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error = %v, want %v", what, err, target)
	}
}

// wantStatus fails unless run ref is in status want.
func (e *env) wantStatus(ref string, want store.Status) *store.Run {
	e.t.Helper()
	r := e.get(ref)
	if r.Status != want {
		e.t.Fatalf("run %s: status = %s, want %s", ref, r.Status, want)
	}
	return r
}

// sameTime reports whether a and b are within timeTolerance.
func sameTime(a, b time.Time) bool {
	d := a.Sub(b)
	return d < timeTolerance && d > -timeTolerance
}

func wantTime(t *testing.T, what string, got, want time.Time) {
	t.Helper()
	if !sameTime(got, want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func wantTimePtr(t *testing.T, what string, got *time.Time, want time.Time) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s = nil, want %v", what, want)
	}
	wantTime(t, what, *got, want)
}

func wantIDs(t *testing.T, what string, got, want []string) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// wantIDSet fails unless got and want hold the same IDs, in any order.
func wantIDSet(t *testing.T, what string, got, want []string) {
	t.Helper()
	got, want = slices.Sorted(slices.Values(got)), slices.Sorted(slices.Values(want))
	if !slices.Equal(got, want) {
		t.Fatalf("%s = %v, want %v (any order)", what, got, want)
	}
}

// wantSignal waits for one signal on ch.
func wantSignal(t *testing.T, what string, ch <-chan struct{}) {
	t.Helper()
	timer := time.NewTimer(signalTimeout)
	defer timer.Stop()
	select {
	case <-ch:
	case <-timer.C:
		t.Fatalf("%s: no signal within %v", what, signalTimeout)
	}
}
