package storetest

import (
	"bytes"
	"testing"

	"github.com/trellis-dev/trellis/store"
)

// Ref resolution, shared by RunGet, HistoryList, KVGet, RunCancel and RunResume: the
// exact run ID first, else the latest (highest Sequence) run with that workflow ID, else
// ErrRunNotFound.
var getCases = []testCase{
	{"ByRunID", getByRunID},
	{"WorkflowIDResolvesToLatest", getWorkflowIDLatest},
	{"RunIDBeforeWorkflowID", getRunIDFirst},
	{"NotFound", getNotFound},
}

// doneStep returns a finished step op at pos.
func (e *env) doneStep(pos int, name string, result string) *store.Op {
	now := e.clk.Now()
	return &store.Op{Position: pos, Kind: store.OpStep, Name: name, Done: true,
		Result: []byte(result), Attempts: 1, StartedAt: now, FinishedAt: &now}
}

// kvGet reads key of run ref in namespace ns.
func (e *env) kvGet(ref, key string) ([]byte, error) {
	return e.st.KVGet(e.ctx, &store.KVGetParams{Namespace: ns, Ref: ref, Key: key})
}

func (e *env) wantKV(ref, key, want string) {
	e.t.Helper()
	got, err := e.kvGet(ref, key)
	if err != nil {
		e.t.Fatalf("KVGet(%s, %s): %v", ref, key, err)
	}
	if !bytes.Equal(got, []byte(want)) {
		e.t.Fatalf("KVGet(%s, %s) = %q, want %q", ref, key, got, want)
	}
}

func getByRunID(t *testing.T, e *env) {
	a := e.create()
	b := e.create()
	if got := e.get(a.ID); got.ID != a.ID || got.WorkflowID != a.WorkflowID {
		t.Fatalf("RunGet(%s) = %+v", a.ID, got)
	}
	if got := e.get(b.WorkflowID); got.ID != b.ID {
		t.Fatalf("RunGet(%s) = %s, want %s", b.WorkflowID, got.ID, b.ID)
	}
}

func getWorkflowIDLatest(t *testing.T, e *env) {
	old := e.start(withWorkflowID("X"))
	e.checkpoint(old, store.CheckpointParams{Status: store.StatusSucceeded,
		Ops: []*store.Op{e.doneStep(0, "old", `1`)}, KV: []store.KVWrite{{Key: "k", Value: []byte(`"old"`)}}})
	latest := e.start(withWorkflowID("X"))
	e.checkpoint(latest, store.CheckpointParams{Status: store.StatusRunning,
		Ops: []*store.Op{e.doneStep(0, "latest", `2`)}, KV: []store.KVWrite{{Key: "k", Value: []byte(`"latest"`)}}})
	e.block(latest)

	if got := e.get("X"); got.ID != latest.Run.ID {
		t.Fatalf("RunGet(X) = %s, want the latest run %s", got.ID, latest.Run.ID)
	}
	if ops := e.history("X"); len(ops) != 1 || ops[0].Name != "latest" {
		t.Fatalf("HistoryList(X) = %v, want the latest run's op", opNames(ops))
	}
	e.wantKV("X", "k", `"latest"`)
	e.wantKV(old.Run.ID, "k", `"old"`)
	r, err := e.st.RunResume(e.ctx, &store.RunResumeParams{Namespace: ns, Ref: "X"})
	if err != nil || r.ID != latest.Run.ID || r.Status != store.StatusPending {
		t.Fatalf("RunResume(X) = %+v, %v; want latest run %s pending", r, err, latest.Run.ID)
	}
	r, err = e.st.RunCancel(e.ctx, &store.RunCancelParams{Namespace: ns, Ref: "X"})
	if err != nil || r.ID != latest.Run.ID {
		t.Fatalf("RunCancel(X) = %+v, %v; want latest run %s", r, err, latest.Run.ID)
	}
}

func opNames(ops []*store.Op) []string {
	names := make([]string, 0, len(ops))
	for _, op := range ops {
		names = append(names, op.Name)
	}
	return names
}

func getRunIDFirst(t *testing.T, e *env) {
	a := e.start(withID("alpha"), withWorkflowID("wf-a"))
	e.checkpoint(a, store.CheckpointParams{Status: store.StatusRunning,
		Ops: []*store.Op{e.doneStep(0, "a", `1`)}, KV: []store.KVWrite{{Key: "who", Value: []byte(`"a"`)}}})
	// b's workflow ID is a's run ID, and b is newer.
	b := e.start(withID("beta"), withWorkflowID("alpha"))
	e.checkpoint(b, store.CheckpointParams{Status: store.StatusRunning,
		Ops: []*store.Op{e.doneStep(0, "b", `1`)}, KV: []store.KVWrite{{Key: "who", Value: []byte(`"b"`)}}})

	if got := e.get("alpha"); got.ID != "alpha" {
		t.Fatalf("RunGet(alpha) = run %s, want run alpha (exact ID first)", got.ID)
	}
	if ops := e.history("alpha"); len(ops) != 1 || ops[0].Name != "a" {
		t.Fatalf("HistoryList(alpha) = %v, want [a]", opNames(ops))
	}
	e.wantKV("alpha", "who", `"a"`)
	r, err := e.st.RunCancel(e.ctx, &store.RunCancelParams{Namespace: ns, Ref: "alpha"})
	if err != nil || r.ID != "alpha" {
		t.Fatalf("RunCancel(alpha) = %+v, %v; want run alpha", r, err)
	}
	if e.get("beta").CancelRequested {
		t.Fatal("RunCancel(alpha) flagged run beta")
	}
}

func getNotFound(t *testing.T, e *env) {
	e.create(withNamespace("other"), withID("elsewhere"))
	for _, ref := range []string{"missing", "elsewhere"} {
		_, err := e.st.RunGet(e.ctx, &store.RunGetParams{Namespace: ns, Ref: ref})
		wantErr(t, "RunGet("+ref+")", err, store.ErrRunNotFound)
		_, err = e.st.HistoryList(e.ctx, &store.HistoryListParams{Namespace: ns, Ref: ref})
		wantErr(t, "HistoryList("+ref+")", err, store.ErrRunNotFound)
		_, err = e.kvGet(ref, "k")
		wantErr(t, "KVGet("+ref+")", err, store.ErrRunNotFound)
		_, err = e.st.RunCancel(e.ctx, &store.RunCancelParams{Namespace: ns, Ref: ref})
		wantErr(t, "RunCancel("+ref+")", err, store.ErrRunNotFound)
		_, err = e.st.RunResume(e.ctx, &store.RunResumeParams{Namespace: ns, Ref: ref})
		wantErr(t, "RunResume("+ref+")", err, store.ErrRunNotFound)
	}
	if got := e.getIn("other", "elsewhere"); got.Status != store.StatusPending {
		t.Fatalf("run in other namespace changed: %+v", got)
	}
}
