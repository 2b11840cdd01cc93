package storetest

import (
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

var workerCases = []testCase{
	{"HeartbeatCreates", workerHeartbeatCreates},
	{"HeartbeatRefreshes", workerHeartbeatRefreshes},
	{"StartResetsStartedAt", workerStartResets},
	{"LiveUntilTTL", workerLiveUntilTTL},
	{"StartForgetsLongDead", workerStartForgets},
	{"ListByNamespaceAndName", workerListByNamespace},
	{"Remove", workerRemove},
	{"Owned", workerOwned},
	{"InvalidParams", workerInvalidParams},
	{"UnservedReason", workerUnservedReason},
	{"UnservedOnlyPending", workerUnservedOnlyPending},
	{"Counts", workerCounts},
}

const workerTTL = 10 * time.Second

// heartbeat records a heartbeat of worker name in ns serving wfs from every queue.
func (e *env) heartbeat(name string, start bool, wfs ...string) {
	e.t.Helper()
	e.heartbeatWith(&store.WorkerHeartbeatParams{Namespace: ns, Name: name, Workflows: wfs, TTL: workerTTL, Start: start})
}

func (e *env) heartbeatWith(p *store.WorkerHeartbeatParams) {
	e.t.Helper()
	if err := e.st.WorkerHeartbeat(e.ctx, p); err != nil {
		e.t.Fatalf("WorkerHeartbeat(%s): %v", p.Name, err)
	}
}

func (e *env) workers(namespace string) []*store.Worker {
	e.t.Helper()
	ws, err := e.st.WorkerList(e.ctx, &store.WorkerListParams{Namespace: namespace})
	if err != nil {
		e.t.Fatalf("WorkerList: %v", err)
	}
	if ws == nil {
		e.t.Fatal("WorkerList returned nil, want a (possibly empty) list")
	}
	return ws
}

func (e *env) oneWorker(namespace string) *store.Worker {
	e.t.Helper()
	ws := e.workers(namespace)
	if len(ws) != 1 {
		e.t.Fatalf("WorkerList = %d records, want 1", len(ws))
	}
	return ws[0]
}

func workerNames(ws []*store.Worker) []string {
	names := make([]string, len(ws))
	for i, w := range ws {
		names[i] = w.Name
	}
	return names
}

func workerHeartbeatCreates(t *testing.T, e *env) {
	now := e.clk.Now()
	e.heartbeatWith(&store.WorkerHeartbeatParams{Namespace: ns, Name: worker, Workflows: []string{"a", "b"},
		Queues: []string{"q1", "q2"}, Version: "v1.2.3", TTL: workerTTL, Start: true})
	w := e.oneWorker(ns)
	if w.Namespace != ns || w.Name != worker || w.Version != "v1.2.3" || !w.Live ||
		!slices.Equal(w.Workflows, []string{"a", "b"}) || !slices.Equal(w.Queues, []string{"q1", "q2"}) {
		t.Fatalf("worker record = %+v", w)
	}
	wantTime(t, "StartedAt", w.StartedAt, now)
	wantTime(t, "LastSeenAt", w.LastSeenAt, now)
	wantTime(t, "ExpiresAt", w.ExpiresAt, now.Add(workerTTL))
	if !w.Serves("a", "q2") || w.Serves("a", "q3") || w.Serves("c", "q1") {
		t.Fatalf("Serves of %+v is wrong", w)
	}
}

func workerHeartbeatRefreshes(t *testing.T, e *env) {
	started := e.clk.Now()
	e.heartbeat(worker, true, "a")
	now := e.clk.Advance(3 * time.Second)
	e.heartbeatWith(&store.WorkerHeartbeatParams{Namespace: ns, Name: worker, Workflows: []string{"a", "b"},
		Version: "v2", TTL: time.Minute})
	w := e.oneWorker(ns)
	if !slices.Equal(w.Workflows, []string{"a", "b"}) || len(w.Queues) != 0 || w.Version != "v2" {
		t.Fatalf("refreshed record = %+v", w)
	}
	if !w.Serves("b", "any-queue") {
		t.Fatal("a worker without queues does not serve every queue")
	}
	wantTime(t, "StartedAt after a heartbeat", w.StartedAt, started)
	wantTime(t, "LastSeenAt", w.LastSeenAt, now)
	wantTime(t, "ExpiresAt", w.ExpiresAt, now.Add(time.Minute))
}

// A worker restarted under the same name (Start) gets a new StartedAt.
func workerStartResets(t *testing.T, e *env) {
	e.heartbeat(worker, true, "a")
	now := e.clk.Advance(time.Minute)
	e.heartbeat(worker, true, "a")
	wantTime(t, "StartedAt after a restart", e.oneWorker(ns).StartedAt, now)
}

func workerLiveUntilTTL(t *testing.T, e *env) {
	e.heartbeat(worker, true, "a")
	e.clk.Advance(workerTTL - time.Millisecond)
	if !e.oneWorker(ns).Live {
		t.Fatal("worker not live before its TTL ran out")
	}
	e.clk.Advance(time.Millisecond)
	if w := e.oneWorker(ns); w.Live {
		t.Fatalf("worker live at its ExpiresAt %v (now %v)", w.ExpiresAt, e.clk.Now())
	}
	e.heartbeat(worker, false, "a")
	if !e.oneWorker(ns).Live {
		t.Fatal("worker not live again after a heartbeat")
	}
}

// A starting worker deletes the records of its namespace dead for longer than
// WorkerForgetAfter, and only those.
func workerStartForgets(t *testing.T, e *env) {
	e.heartbeat("old", true, "a")
	e.heartbeatWith(&store.WorkerHeartbeatParams{Namespace: "other", Name: "old", Workflows: []string{"a"}, TTL: workerTTL})
	e.clk.Advance(workerTTL + store.WorkerForgetAfter - time.Second)
	e.heartbeat("recent", true, "a") // dead since 1s before the limit
	e.heartbeat("new", true, "a")
	wantIDs(t, "workers", workerNames(e.workers(ns)), []string{"new", "old", "recent"})
	e.clk.Advance(2 * time.Second)
	e.heartbeat("recent", false, "a") // a plain heartbeat forgets nothing
	wantIDs(t, "workers after a heartbeat", workerNames(e.workers(ns)), []string{"new", "old", "recent"})
	e.heartbeat("newer", true, "a")
	wantIDs(t, "workers after a start", workerNames(e.workers(ns)), []string{"new", "newer", "recent"})
	wantIDs(t, "workers of another namespace", workerNames(e.workers("other")), []string{"old"})
}

func workerListByNamespace(t *testing.T, e *env) {
	for _, name := range []string{"w-c", "w-a", "w-b"} {
		e.heartbeat(name, true, "a")
	}
	e.heartbeatWith(&store.WorkerHeartbeatParams{Namespace: "other", Name: "w-0", Workflows: []string{"a"}, TTL: workerTTL})
	wantIDs(t, "workers", workerNames(e.workers(ns)), []string{"w-a", "w-b", "w-c"})
	wantIDs(t, "workers of another namespace", workerNames(e.workers("other")), []string{"w-0"})
	if ws := e.workers("empty"); len(ws) != 0 {
		t.Fatalf("workers of an empty namespace = %v", workerNames(ws))
	}
}

func workerRemove(t *testing.T, e *env) {
	e.heartbeat("w-a", true, "a")
	e.heartbeat("w-b", true, "a")
	e.heartbeatWith(&store.WorkerHeartbeatParams{Namespace: "other", Name: "w-a", Workflows: []string{"a"}, TTL: workerTTL})
	for range 2 { // removing twice is not an error
		if err := e.st.WorkerRemove(e.ctx, &store.WorkerRemoveParams{Namespace: ns, Name: "w-a"}); err != nil {
			t.Fatalf("WorkerRemove: %v", err)
		}
	}
	wantIDs(t, "workers after remove", workerNames(e.workers(ns)), []string{"w-b"})
	wantIDs(t, "workers of another namespace", workerNames(e.workers("other")), []string{"w-a"})
}

// A record belongs to the owner whose heartbeat made it: another owner can
// neither refresh nor remove it, and nothing changes; a caller without an
// owner (the store's own workers) may do both.
func workerOwned(t *testing.T, e *env) {
	if _, remote := e.st.(*viaWorker); remote {
		// Through a server the owner is the caller's principal, never a
		// parameter: the server's tests cover it.
		t.Skip("the owner is set by the server")
	}
	beat := func(owner string, wfs ...string) error {
		return e.st.WorkerHeartbeat(e.ctx, &store.WorkerHeartbeatParams{Namespace: ns, Name: "w", Workflows: wfs,
			TTL: workerTTL, Owner: owner})
	}
	remove := func(owner string) error {
		return e.st.WorkerRemove(e.ctx, &store.WorkerRemoveParams{Namespace: ns, Name: "w", Owner: owner})
	}
	if err := beat("alice", "a"); err != nil {
		t.Fatalf("first heartbeat: %v", err)
	}
	if err := beat("alice", "a", "b"); err != nil {
		t.Fatalf("the owner's heartbeat: %v", err)
	}
	if err := beat("mallory", "x"); !errors.Is(err, store.ErrWorkerOwned) {
		t.Fatalf("another owner's heartbeat = %v, want ErrWorkerOwned", err)
	}
	if err := remove("mallory"); !errors.Is(err, store.ErrWorkerOwned) {
		t.Fatalf("another owner's remove = %v, want ErrWorkerOwned", err)
	}
	w := e.oneWorker(ns)
	if w.Owner != "alice" || !slices.Equal(w.Workflows, []string{"a", "b"}) {
		t.Fatalf("record = owner %q workflows %v, want alice's, unchanged", w.Owner, w.Workflows)
	}
	if err := beat("", "s"); err != nil {
		t.Fatalf("a heartbeat without owner: %v", err)
	}
	if w := e.oneWorker(ns); w.Owner != "" || !slices.Equal(w.Workflows, []string{"s"}) {
		t.Fatalf("record = owner %q workflows %v, want taken over without owner", w.Owner, w.Workflows)
	}
	if err := beat("alice", "a"); !errors.Is(err, store.ErrWorkerOwned) {
		t.Fatalf("alice's heartbeat on the taken-over record = %v, want ErrWorkerOwned", err)
	}
	if err := remove(""); err != nil {
		t.Fatalf("remove without owner: %v", err)
	}
	if err := remove("mallory"); err != nil {
		t.Fatalf("removing an absent record = %v, want nil", err)
	}
	if err := beat("mallory", "x"); err != nil {
		t.Fatalf("a new record's first heartbeat: %v", err)
	}
	if err := remove("mallory"); err != nil || len(e.workers(ns)) != 0 {
		t.Fatalf("the owner's remove = %v, %d records left", err, len(e.workers(ns)))
	}
	// A dead record (past its TTL) is anyone's: taking it over grants nothing.
	if err := beat("alice", "a"); err != nil {
		t.Fatal(err)
	}
	e.clk.Advance(workerTTL + time.Second)
	if err := beat("bob", "b"); err != nil {
		t.Fatalf("another owner's heartbeat on a dead record: %v", err)
	}
	if w := e.oneWorker(ns); w.Owner != "bob" || !w.Live {
		t.Fatalf("record = owner %q live %v, want bob's, live", w.Owner, w.Live)
	}
	e.clk.Advance(workerTTL + time.Second)
	if err := remove("carol"); err != nil || len(e.workers(ns)) != 0 {
		t.Fatalf("another owner's remove of a dead record = %v, %d records left", err, len(e.workers(ns)))
	}
}

func workerInvalidParams(t *testing.T, e *env) {
	ok := func() *store.WorkerHeartbeatParams {
		return &store.WorkerHeartbeatParams{Namespace: ns, Name: worker, Workflows: []string{"a"}, TTL: workerTTL}
	}
	for _, bad := range []func(*store.WorkerHeartbeatParams){
		func(p *store.WorkerHeartbeatParams) { p.Namespace = "" },
		func(p *store.WorkerHeartbeatParams) { p.Name = "" },
		func(p *store.WorkerHeartbeatParams) { p.TTL = 0 },
		func(p *store.WorkerHeartbeatParams) { p.Workflows = []string{"a", ""} },
		func(p *store.WorkerHeartbeatParams) { p.Queues = []string{""} },
	} {
		p := ok()
		bad(p)
		wantErr(t, "WorkerHeartbeat with bad params", e.st.WorkerHeartbeat(e.ctx, p), store.ErrInvalidParams)
	}
	if ws := e.workers(ns); len(ws) != 0 {
		t.Fatalf("rejected heartbeats wrote %v", workerNames(ws))
	}
}

// serveAll records a live worker (for a day) that serves the suite's workflows on
// every queue, so that pending runs show only their own wait reasons.
func (e *env) serveAll() {
	e.t.Helper()
	e.heartbeatWith(&store.WorkerHeartbeatParams{Namespace: ns, Name: "serves-all",
		Workflows: []string{wf, childWF}, TTL: 24 * time.Hour, Start: true})
}

// wantReason checks the wait reason RunGet and RunList give run.
func (e *env) wantReason(runID, want string) {
	e.t.Helper()
	if got := e.get(runID).WaitReason; got != want {
		e.t.Fatalf("RunGet: wait reason %q, want %q", got, want)
	}
	for _, r := range e.list(store.RunListParams{Namespace: ns}).Runs {
		if r.ID == runID && r.WaitReason != want {
			e.t.Fatalf("RunList: wait reason %q, want %q", r.WaitReason, want)
		}
	}
}

// A pending run whose workflow no live worker of its namespace serves (on its
// queue) says so in its wait reason, computed when read.
func workerUnservedReason(t *testing.T, e *env) {
	unserved := `no live worker serves workflow "wf"`
	run := e.create()
	e.wantReason(run.ID, unserved)
	e.heartbeatWith(&store.WorkerHeartbeatParams{Namespace: "other", Name: "elsewhere", Workflows: []string{wf}, TTL: workerTTL})
	e.heartbeat("other-workflows", true, "x", "y")
	e.wantReason(run.ID, unserved)
	e.heartbeatWith(&store.WorkerHeartbeatParams{Namespace: ns, Name: "other-queue", Workflows: []string{wf},
		Queues: []string{"q2"}, TTL: workerTTL})
	e.wantReason(run.ID, `no live worker serves workflow "wf" on queue "default"`)
	e.heartbeatWith(&store.WorkerHeartbeatParams{Namespace: ns, Name: "serves", Workflows: []string{"x", wf},
		Queues: []string{"q2", queue}, TTL: workerTTL})
	e.wantReason(run.ID, "")
	e.clk.Advance(workerTTL) // every worker is gone
	e.wantReason(run.ID, unserved)
}

// Only pending runs without a reason of their own get one.
func workerUnservedOnlyPending(t *testing.T, e *env) {
	running := e.start()
	e.wantReason(running.Run.ID, "")
	waiting := e.start()
	e.checkpoint(waiting, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "event"})
	e.wantReason(waiting.Run.ID, "event")
	done := e.start()
	e.finish(done)
	e.wantReason(done.Run.ID, "")
	parent := e.start()
	g := e.group(1, 2, "c")
	g.MaxConcurrency = 1
	e.createGroup(parent, g)
	e.wantReason("c-0", `no live worker serves workflow "child"`)
	if r := e.get("c-1"); r.WaitReason == "" || strings.HasPrefix(r.WaitReason, "no live worker") {
		t.Fatalf("held child's wait reason = %q, want its own", r.WaitReason)
	}
}

// workerCounts counts the live workers of every namespace (stores that
// implement store.WorkerCounter): expired records are not counted, and a
// namespace without a live worker is left out.
func workerCounts(t *testing.T, e *env) {
	wc, ok := e.st.(store.WorkerCounter)
	if !ok {
		t.Skip("the store does not count workers")
	}
	count := func() map[string]int64 {
		t.Helper()
		got, err := wc.WorkerCounts(e.ctx)
		if err != nil {
			t.Fatalf("WorkerCounts: %v", err)
		}
		m := map[string]int64{}
		for _, c := range got {
			m[c.Namespace] = c.Count
		}
		return m
	}
	e.heartbeat("dead", true, "a")
	e.clk.Advance(workerTTL)
	e.heartbeat("w1", true, "a")
	e.heartbeat("w2", true, "a")
	e.heartbeatWith(&store.WorkerHeartbeatParams{Namespace: "other", Name: "w3", Workflows: []string{"a"}, TTL: workerTTL})
	e.heartbeatWith(&store.WorkerHeartbeatParams{Namespace: "gone", Name: "w4", Workflows: []string{"a"}, TTL: time.Second})
	e.clk.Advance(time.Second)
	if got, want := count(), map[string]int64{ns: 2, "other": 1}; !maps.Equal(got, want) {
		t.Fatalf("WorkerCounts = %v, want %v", got, want)
	}
}
