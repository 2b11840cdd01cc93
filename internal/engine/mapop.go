package engine

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// MapSpec describes a Map: one child run per item, in one group.
type MapSpec struct {
	Workflow       string
	Items          int
	MaxConcurrency int
	CollectErrors  bool
	// Encode encodes item i; Params returns the parameters of item i's child.
	Encode func(i int) ([]byte, error)
	Params func(runID string, input []byte) *store.RunCreateParams
}

// ItemError is the failure of one item of a Map, as recorded.
type ItemError struct {
	Index   int          `json:"index"`
	RunID   string       `json:"run_id"`
	Status  store.Status `json:"status"`
	Message string       `json:"message"`
	Type    string       `json:"type,omitempty"`
}

// mapState is what a Map op records: the group's outcome and, when it failed
// fast, the failed items; otherwise the outcome of every item, so that a replay
// of the parent reads one op instead of every child's row.
type mapState struct {
	Items   int                 `json:"items"`
	Outcome *store.GroupOutcome `json:"outcome,omitempty"`
	Failed  []ItemError         `json:"failed,omitempty"`
	Results []mapResult         `json:"results,omitempty"`
}

// mapResult is the recorded outcome of one item of a Map.
type mapResult struct {
	Status store.Status     `json:"status"`
	Output []byte           `json:"output,omitempty"`
	Error  *store.ErrorInfo `json:"error,omitempty"`
}

// Map starts spec's children (or finds them in history), waits for the group to
// end and returns the children in item order. With fail-fast (not
// CollectErrors) and a failure, it returns the failed items known when the group
// ended instead, and no runs.
func (rs *RunState) Map(spec MapSpec, detached bool) ([]*store.Run, []ItemError, error) {
	rs.checkUnwind()
	pos, rec := rs.next(store.OpChild, spec.Workflow)
	m := &mapWait{rs: rs, pos: pos, name: spec.Workflow, collect: spec.CollectErrors}
	if rec == nil {
		if err := rs.startMap(m, spec, detached); err != nil {
			return nil, nil, err
		}
	} else {
		m.replay(rec, spec.Items)
	}
	if err := rs.Await(m, detached); err != nil {
		return nil, nil, err
	}
	if !spec.CollectErrors && len(m.state.Failed) > 0 {
		return nil, m.state.Failed, nil
	}
	if spec.Items == 0 {
		return nil, nil, nil
	}
	if len(m.state.Results) == spec.Items {
		return m.resultRuns(), nil, nil
	}
	runs := rs.children(pos) // a history recorded before Results existed
	if len(runs) != spec.Items {
		rs.requestUnwind(unwindAbandon, fmt.Errorf("map at position %d: the store holds %d children for %d items", pos, len(runs), spec.Items), nil, "")
		rs.stopNow()
	}
	return runs, nil, nil
}

// startMap queues the group of children of a new Map and its op.
func (rs *RunState) startMap(m *mapWait, spec MapSpec, detached bool) error {
	if err := rs.interrupted(detached); err != nil {
		return err
	}
	group := &store.ChildGroup{Position: m.pos, MaxConcurrency: spec.MaxConcurrency, FailFast: !spec.CollectErrors,
		Runs: make([]*store.RunCreateParams, spec.Items)}
	for i := range spec.Items {
		input, err := spec.Encode(i)
		if err != nil {
			return fmt.Errorf("encoding item %d of map %s: %w", i, spec.Workflow, err)
		}
		group.Runs[i] = spec.Params(childRunID(rs.run.ID, m.pos, i), input)
	}
	if spec.Items > 0 {
		rs.queueWait(func(w *queued) { w.children = append(w.children, group) })
	}
	m.state = mapState{Items: spec.Items}
	b, _ := json.Marshal(m.state)
	rs.recordWait(m.pos, store.OpChild, spec.Workflow, spec.Items == 0, b, nil)
	m.done = spec.Items == 0
	return nil
}

// replay restores a Map's state from its recorded op.
func (m *mapWait) replay(rec *store.Op, items int) {
	rs := m.rs
	if err := json.Unmarshal(rec.Result, &m.state); err != nil {
		rs.block(&NonDeterminismError{Position: m.pos, Recorded: describe(rec.Kind, rec.Name) + " with unreadable state", Requested: "map of " + m.name})
	}
	m.done = rec.Done
	if m.state.Items != items {
		rs.block(&NonDeterminismError{Position: m.pos, Recorded: fmt.Sprintf("map of %d items", m.state.Items),
			Requested: fmt.Sprintf("map of %d items", items)})
	}
}

// ItemFailure is the recorded failure of item i, run r.
func ItemFailure(i int, r *store.Run) ItemError {
	ie := ItemError{Index: i, RunID: r.ID, Status: r.Status}
	if r.Error != nil {
		ie.Message, ie.Type = r.Error.Message, r.Error.Type
	}
	return ie
}

// mapWait is the wait of a Map for its group's end.
type mapWait struct {
	rs      *RunState
	pos     int
	name    string
	collect bool // CollectErrors: every item's result is wanted, failed or not
	state   mapState
	done    bool
}

func (m *mapWait) settled() bool { return m.done }

func (m *mapWait) try() bool {
	rs := m.rs
	e := rs.takeEvent(store.GroupEvent(m.pos))
	if e == nil {
		return false
	}
	var outcome store.GroupOutcome
	_ = json.Unmarshal(e.Payload, &outcome)
	m.state.Outcome = &outcome
	// One read of the children, now; what the workflow sees is recorded, so
	// later changes of the children (cancellations under way) cannot change a
	// replay, and a replay reads no child rows.
	runs := rs.children(m.pos)
	if outcome.Succeeded < outcome.Total {
		for i, r := range runs {
			if r.Status.Terminal() && r.Status != store.StatusSucceeded {
				m.state.Failed = append(m.state.Failed, ItemFailure(i, r))
			}
		}
	}
	if outcome.Succeeded == outcome.Total || m.collect {
		m.state.Results = make([]mapResult, len(runs))
		for i, r := range runs {
			m.state.Results[i] = mapResult{Status: r.Status, Output: r.Output, Error: r.Error}
		}
	}
	b, _ := json.Marshal(m.state)
	rs.recordWait(m.pos, store.OpChild, m.name, true, b, nil)
	m.done = true
	return true
}

func (m *mapWait) needs() (*time.Time, []string, string) {
	return nil, []string{store.GroupEvent(m.pos)}, fmt.Sprintf("waiting for %d child runs of %s", m.state.Items, m.name)
}

// resultRuns are the children as their recorded results describe them.
func (m *mapWait) resultRuns() []*store.Run {
	runs := make([]*store.Run, len(m.state.Results))
	for i, r := range m.state.Results {
		runs[i] = &store.Run{Namespace: m.rs.run.Namespace, ID: childRunID(m.rs.run.ID, m.pos, i),
			Status: r.Status, Output: r.Output, Error: r.Error, ParentID: m.rs.run.ID}
	}
	return runs
}

// MapSelfContained reports whether op, a finished Map's op, holds what a replay
// needs (every item's result, or the failed items of a fail-fast end) without
// reading the child runs. Map ops recorded by older versions do not.
func MapSelfContained(op *store.Op) bool {
	var st mapState
	if !op.Done || json.Unmarshal(op.Result, &st) != nil {
		return false
	}
	return st.Items == 0 || len(st.Results) == st.Items || len(st.Failed) > 0
}
