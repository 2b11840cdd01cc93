package storetest

import (
	"errors"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// A run pinned to a workflow version (store.Run.Pinned) goes only to a worker
// that serves that version (RunsClaimParams.Versions); a run that is not
// pinned goes to any worker of its workflow, whatever its version.
var versionCases = []testCase{
	{"PinnedRoundTrip", versionPinnedRoundTrip},
	{"ClaimTakesServedVersions", versionClaimServed},
	{"ClaimLimitedTakesServedVersions", versionClaimLimited},
	{"EventClaimTakesServedVersions", versionEventClaim},
	{"InvalidParams", versionInvalidParams},
	{"WorkerRecordVersions", versionWorkerRecord},
	{"UnservedReason", versionUnservedReason},
}

func withPin(v int) runOpt {
	return func(p *store.RunCreateParams) { p.Version, p.Pinned = v, true }
}
func withVersion(v int) runOpt { return func(p *store.RunCreateParams) { p.Version = v } }
func claimVersions(vs map[string][]int) claimOpt {
	return func(p *store.RunsClaimParams) { p.Versions = vs }
}

// A pinned run reads back pinned, from RunCreate, RunsCreate, RunGet and
// RunList; a run with a version but no pin does not.
func versionPinnedRoundTrip(t *testing.T, e *env) {
	pinned := e.create(withPin(3))
	free := e.create(withVersion(3))
	if !pinned.Pinned || pinned.Version != 3 || free.Pinned || free.Version != 3 {
		t.Fatalf("RunCreate: pinned = %v v%d, free = %v v%d", pinned.Pinned, pinned.Version, free.Pinned, free.Version)
	}
	batch, err := e.st.RunsCreate(e.ctx, &store.RunsCreateParams{Namespace: ns,
		Runs: []*store.RunCreateParams{e.params(withPin(7)), e.params(withVersion(7))}})
	if err != nil {
		t.Fatalf("RunsCreate: %v", err)
	}
	if r := batch.Items[0].Run; !r.Pinned || r.Version != 7 {
		t.Fatalf("RunsCreate: pinned item = %v v%d", r.Pinned, r.Version)
	}
	if r := batch.Items[1].Run; r.Pinned || r.Version != 7 {
		t.Fatalf("RunsCreate: free item = %v v%d", r.Pinned, r.Version)
	}
	want := map[string]bool{pinned.ID: true, free.ID: false, batch.Items[0].Run.ID: true, batch.Items[1].Run.ID: false}
	for id, pin := range want {
		if r := e.get(id); r.Pinned != pin {
			t.Fatalf("RunGet(%s).Pinned = %v, want %v", id, r.Pinned, pin)
		}
	}
	for _, r := range e.list(store.RunListParams{Namespace: ns}).Runs {
		if r.Pinned != want[r.ID] {
			t.Fatalf("RunList: %s Pinned = %v, want %v", r.ID, r.Pinned, want[r.ID])
		}
	}
}

// A claim takes the runs that are not pinned, whatever their version, and the
// pinned runs of the versions it serves of their workflow, in claim order.
func versionClaimServed(t *testing.T, e *env) {
	free := e.create(withVersion(1))
	e.clk.Advance(time.Millisecond)
	v2 := e.create(withPin(2))
	e.clk.Advance(time.Millisecond)
	v3 := e.create(withPin(3))
	e.clk.Advance(time.Millisecond)
	other := e.create(withWorkflow("other"), withPin(2))
	// Version 2 of "other" is no version of wf.
	if got := e.claimIDs(claimWorkflows(wf, "other"), claimVersions(map[string][]int{wf: {3, 4}, "other": {1}})); !slices.Equal(got, []string{free.ID, v3.ID}) {
		t.Fatalf("claim serving wf v3, v4 and other v1 = %v, want [%s %s]", got, free.ID, v3.ID)
	}
	e.wantNoClaim(claimWorkflows(wf, "other"))
	if got := e.claimIDs(claimWorkflows(wf, "other"), claimVersions(map[string][]int{wf: {2}, "other": {2}})); !slices.Equal(got, []string{v2.ID, other.ID}) {
		t.Fatalf("claim serving v2 = %v, want [%s %s]", got, v2.ID, other.ID)
	}
}

// The claim of a namespace whose queue limits claims (sqlstore.ClaimLimited)
// takes served versions as the plain claim does.
func versionClaimLimited(t *testing.T, e *env) {
	e.mkNamespace(ns)
	e.mkQueue(store.QueueCreateParams{QueueSettings: store.QueueSettings{ConcurrencyLimit: intp(10)}})
	v2 := e.create(withPin(2))
	e.clk.Advance(time.Millisecond)
	free := e.create(withVersion(2))
	e.clk.Advance(time.Millisecond)
	v3 := e.create(withPin(3))
	if got := e.claimIDs(claimVersions(map[string][]int{wf: {3}})); !slices.Equal(got, []string{free.ID, v3.ID}) {
		t.Fatalf("limited claim serving v3 = %v, want [%s %s]", got, free.ID, v3.ID)
	}
	e.wantNoClaim()
	e.claimOne(v2.ID, claimVersions(map[string][]int{wf: {1, 2}}))
}

// An event that wakes a pinned run leases it to the sender's worker only if
// that worker serves the run's version; the run is woken either way.
func versionEventClaim(t *testing.T, e *env) {
	cr := e.claimOne(e.create(withPin(2)).ID, claimVersions(map[string][]int{wf: {2}}))
	e.wait(cr, "go")
	claim := &store.EventClaim{Worker: "local", LeaseDuration: leaseDur, Workflows: []string{wf},
		Versions: map[string][]int{wf: {1, 3}}}
	if res := e.sendClaim(cr.Run.ID, "go", claim); res.Claimed != nil {
		t.Fatalf("EventSend leased a v2 run to a worker of v1 and v3: %+v", res.Claimed)
	}
	if r := e.get(cr.Run.ID); r.Status != store.StatusPending {
		t.Fatalf("run after the event: %s, want pending", r.Status)
	}
	again := e.claimOne(cr.Run.ID, claimVersions(map[string][]int{wf: {2}}))
	e.wait(again, "more")
	claim.Versions = map[string][]int{wf: {2}}
	if res := e.sendClaim(cr.Run.ID, "more", claim); res.Claimed == nil || res.Claimed.Run.LeaseOwner != "local" {
		t.Fatalf("EventSend by a worker of v2 = %+v, want the run leased to it", res)
	}
}

// Bad versions are refused whole: nothing is created, claimed or recorded.
func versionInvalidParams(t *testing.T, e *env) {
	for _, v := range []int{0, -1, store.MaxVersion + 1} {
		p := e.params(withPin(v))
		if _, err := e.st.RunCreate(e.ctx, p); !errors.Is(err, store.ErrInvalidParams) {
			t.Fatalf("RunCreate pinned to %d: %v, want ErrInvalidParams", v, err)
		}
		if _, err := e.st.RunsCreate(e.ctx, &store.RunsCreateParams{Namespace: ns, Runs: []*store.RunCreateParams{e.params(), p}}); !errors.Is(err, store.ErrInvalidParams) {
			t.Fatalf("RunsCreate with a run pinned to %d: %v, want ErrInvalidParams", v, err)
		}
	}
	if runs := e.list(store.RunListParams{Namespace: ns}).Runs; len(runs) != 0 {
		t.Fatalf("refused creates left %d runs", len(runs))
	}
	e.create()
	for _, vs := range []map[string][]int{{wf: {-1}}, {"": {1}}, {wf: {store.MaxVersion + 1}}} {
		if _, err := e.st.RunsClaim(e.ctx, claimParams(claimVersions(vs))); !errors.Is(err, store.ErrInvalidParams) {
			t.Fatalf("RunsClaim with versions %v: %v, want ErrInvalidParams", vs, err)
		}
		err := e.st.WorkerHeartbeat(e.ctx, &store.WorkerHeartbeatParams{Namespace: ns, Name: worker, Workflows: []string{wf},
			Versions: vs, TTL: workerTTL})
		if !errors.Is(err, store.ErrInvalidParams) {
			t.Fatalf("WorkerHeartbeat with versions %v: %v, want ErrInvalidParams", vs, err)
		}
	}
	if len(e.workers(ns)) != 0 {
		t.Fatal("a refused heartbeat left a worker record")
	}
	if r := e.list(store.RunListParams{Namespace: ns}).Runs; len(r) != 1 || r[0].Status != store.StatusPending {
		t.Fatalf("a refused claim changed the run: %+v", r)
	}
}

// A worker's record keeps the versions its heartbeat declares, replaced by
// each heartbeat.
func versionWorkerRecord(t *testing.T, e *env) {
	vs := map[string][]int{wf: {3, 1, 2}, "other": {0}}
	e.heartbeatWith(&store.WorkerHeartbeatParams{Namespace: ns, Name: worker, Workflows: []string{wf, "other"},
		Versions: vs, TTL: workerTTL, Start: true})
	if w := e.oneWorker(ns); !maps.EqualFunc(w.Versions, vs, slices.Equal) {
		t.Fatalf("record's versions = %v, want %v", w.Versions, vs)
	}
	e.heartbeat(worker, false, wf)
	if w := e.oneWorker(ns); len(w.Versions) != 0 {
		t.Fatalf("versions after a heartbeat without = %v, want none", w.Versions)
	}
}

// A pinned run that the live workers of its workflow and queue do not serve
// says which version it waits for and which ones they serve.
func versionUnservedReason(t *testing.T, e *env) {
	run := e.create(withPin(3))
	free := e.create(withVersion(3))
	e.wantReason(run.ID, `no live worker serves workflow "wf"`)
	e.heartbeatWith(&store.WorkerHeartbeatParams{Namespace: ns, Name: "w-none", Workflows: []string{wf}, TTL: workerTTL})
	e.wantReason(run.ID, `version 3 of workflow "wf" is served by no live worker; live workers serve no pinned version`)
	e.wantReason(free.ID, "")
	e.heartbeatWith(&store.WorkerHeartbeatParams{Namespace: ns, Name: "w-2", Workflows: []string{wf},
		Versions: map[string][]int{wf: {2}}, TTL: workerTTL})
	e.wantReason(run.ID, `version 3 of workflow "wf" is served by no live worker; live workers serve version 2`)
	e.heartbeatWith(&store.WorkerHeartbeatParams{Namespace: ns, Name: "w-1", Workflows: []string{wf},
		Versions: map[string][]int{wf: {1, 2}}, TTL: workerTTL})
	e.heartbeatWith(&store.WorkerHeartbeatParams{Namespace: ns, Name: "w-3-elsewhere", Workflows: []string{wf},
		Queues: []string{"q2"}, Versions: map[string][]int{wf: {3}}, TTL: workerTTL})
	e.wantReason(run.ID, `version 3 of workflow "wf" is served by no live worker; live workers serve versions 1 and 2`)
	e.heartbeatWith(&store.WorkerHeartbeatParams{Namespace: ns, Name: "w-3", Workflows: []string{wf},
		Versions: map[string][]int{wf: {3}}, TTL: workerTTL})
	e.wantReason(run.ID, "")
}
