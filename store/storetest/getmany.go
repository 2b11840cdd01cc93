package storetest

import (
	"bytes"
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/trellis-dev/trellis/store"
)

// RunsGet: many runs by run ID in one read, for the results watcher.
var getManyCases = []testCase{
	{"ByIDs", getManyByIDs},
	{"TerminalOnly", getManyTerminal},
	{"Invalid", getManyInvalid},
}

func (e *env) runsGet(p store.RunsGetParams) map[string]*store.Run {
	e.t.Helper()
	if p.Namespace == "" {
		p.Namespace = ns
	}
	runs, err := e.st.RunsGet(e.ctx, &p)
	if err != nil {
		e.t.Fatalf("RunsGet(%v): %v", p.IDs, err)
	}
	got := make(map[string]*store.Run, len(runs))
	for _, r := range runs {
		if got[r.ID] != nil {
			e.t.Fatalf("RunsGet(%v) returned run %s twice", p.IDs, r.ID)
		}
		got[r.ID] = r
	}
	return got
}

func getManyByIDs(t *testing.T, e *env) {
	a, b := e.create(), e.create()
	e.create(withNamespace("other"), withID("elsewhere"))
	// A workflow ID is not a run ID: RunsGet matches run IDs only.
	got := e.runsGet(store.RunsGetParams{IDs: []string{b.ID, a.ID, "missing", "elsewhere", a.WorkflowID, a.ID}})
	if len(got) != 2 || got[a.ID] == nil || got[b.ID] == nil {
		t.Fatalf("RunsGet = %v, want runs %s and %s", slices.Collect(maps.Keys(got)), a.ID, b.ID)
	}
	if r := got[a.ID]; r.WorkflowID != a.WorkflowID || r.Status != store.StatusPending || r.Sequence != a.Sequence {
		t.Fatalf("RunsGet: run %s = %+v, want it as created", a.ID, r)
	}
	if got := e.runsGet(store.RunsGetParams{}); len(got) != 0 {
		t.Fatalf("RunsGet(no IDs) = %d runs", len(got))
	}
}

func getManyTerminal(t *testing.T, e *env) {
	var ids []string
	done := e.start()
	e.checkpoint(done, store.CheckpointParams{Status: store.StatusSucceeded, Output: []byte(`"out"`)})
	failed := e.start()
	e.checkpoint(failed, store.CheckpointParams{Status: store.StatusFailed, Error: &store.ErrorInfo{Message: "boom"}})
	running := e.start()
	ids = append(ids, done.Run.ID, failed.Run.ID, running.Run.ID, e.create().ID)
	got := e.runsGet(store.RunsGetParams{IDs: ids, Statuses: store.TerminalStatuses})
	if len(got) != 2 || got[done.Run.ID] == nil || got[failed.Run.ID] == nil {
		t.Fatalf("RunsGet(terminal) = %v, want the succeeded and the failed run", slices.Collect(maps.Keys(got)))
	}
	if r := got[done.Run.ID]; r.Status != store.StatusSucceeded || !bytes.Equal(r.Output, []byte(`"out"`)) || r.FinishedAt == nil {
		t.Fatalf("RunsGet: succeeded run = %+v", r)
	}
	if r := got[failed.Run.ID]; r.Error == nil || r.Error.Message != "boom" {
		t.Fatalf("RunsGet: failed run's error = %+v", r.Error)
	}
	if got := e.runsGet(store.RunsGetParams{IDs: ids, Statuses: []store.Status{store.StatusRunning}}); len(got) != 1 || got[running.Run.ID] == nil {
		t.Fatalf("RunsGet(running) = %v, want [%s]", slices.Collect(maps.Keys(got)), running.Run.ID)
	}
}

func getManyInvalid(t *testing.T, e *env) {
	r := e.create()
	_, err := e.st.RunsGet(e.ctx, &store.RunsGetParams{Namespace: ns, IDs: []string{r.ID}, Statuses: []store.Status{"bogus"}})
	wantErr(t, "RunsGet(unknown status)", err, store.ErrInvalidParams)
	many := make([]string, store.MaxRunsGet+1)
	for i := range many {
		many[i] = fmt.Sprintf("id-%d", i)
	}
	_, err = e.st.RunsGet(e.ctx, &store.RunsGetParams{Namespace: ns, IDs: many})
	wantErr(t, "RunsGet(too many IDs)", err, store.ErrInvalidParams)
}
