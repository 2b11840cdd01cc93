package engine

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// ChildSpec describes a child run to start.
type ChildSpec struct {
	Workflow string
	Input    any // encoded with the run's codec
	Detached bool
	// Params returns the parameters that create the child with the given run ID
	// and encoded input.
	Params func(runID string, input []byte) *store.RunCreateParams
}

// ChildWait is a child run started by a workflow.
type ChildWait struct {
	rs       *RunState
	pos      int
	runID    string
	detached bool
	op       *store.Op // the recorded outcome, once settled
	err      error     // the child could not be started
}

type childState struct {
	RunID string `json:"run_id"`
}

// childError is what a child op records for a child that did not succeed (the
// field names are those of the root package's ChildError).
type childError struct {
	RunID   string
	Status  store.Status
	Message string
	Type    string
}

func (e *childError) Error() string {
	return fmt.Sprintf("child run %s %s: %s", e.RunID, e.Status, e.Message)
}

// StartChild starts the child run f. The child is created with the parent's next
// checkpoint, with a run ID derived from the parent's, so a replay never starts
// it twice.
func (rs *RunState) StartChild(f *ChildWait, spec ChildSpec, detached bool) {
	rs.checkUnwind()
	pos, rec := rs.next(store.OpChild, spec.Workflow)
	f.rs, f.pos, f.runID, f.detached = rs, pos, childRunID(rs.run.ID, pos, -1), spec.Detached
	if rec != nil {
		if rec.Done && !spec.Detached {
			f.op = rec
		}
		return
	}
	if err := rs.interrupted(detached); err != nil {
		f.err = err
		return
	}
	input, err := rs.Encode(spec.Input)
	if err != nil {
		f.err = fmt.Errorf("encoding input of child %s: %w", spec.Workflow, err)
		return
	}
	p := spec.Params(f.runID, input)
	rs.queueWait(func(w *queued) {
		w.children = append(w.children, &store.ChildGroup{Position: pos, Detached: spec.Detached, Runs: []*store.RunCreateParams{p}})
	})
	b, _ := json.Marshal(childState{RunID: f.runID})
	rs.recordWait(pos, store.OpChild, spec.Workflow, spec.Detached, b, nil)
}

// Refuse settles f with err, without starting a child or taking a position
// in the history: the call that would start it was refused (its options).
func (f *ChildWait) Refuse(err error) { f.err = err }

// RunID returns the child's run ID.
func (f *ChildWait) RunID() string { return f.runID }

// Err returns why the child could not be started, if it could not.
func (f *ChildWait) Err() error { return f.err }

// Detached reports whether the parent does not wait for the child.
func (f *ChildWait) Detached() bool { return f.detached }

// Op returns the recorded outcome once the child finished: its output, or (with
// an error) a JSON object with the fields of the root package's ChildError.
func (f *ChildWait) Op() *store.Op { return f.op }

func (f *ChildWait) settled() bool { return f.op != nil || f.err != nil || f.detached }

func (f *ChildWait) try() bool {
	rs := f.rs
	if rs.takeEvent(store.GroupEvent(f.pos)) == nil {
		return false
	}
	runs := rs.children(f.pos)
	if len(runs) != 1 {
		rs.requestUnwind(unwindAbandon, fmt.Errorf("child run %s: the store holds %d children at position %d", f.runID, len(runs), f.pos), nil, "")
		rs.stopNow()
	}
	child := runs[0]
	if child.Status == store.StatusSucceeded {
		f.op = rs.recordWait(f.pos, store.OpChild, child.Workflow, true, child.Output, nil)
		return true
	}
	ce := &childError{RunID: child.ID, Status: child.Status}
	if child.Error != nil {
		ce.Message, ce.Type = child.Error.Message, child.Error.Type
	}
	b, _ := json.Marshal(ce)
	f.op = rs.recordWait(f.pos, store.OpChild, child.Workflow, true, b, &TypedError{Msg: ce.Error(), Type: "child_" + string(child.Status)})
	return true
}

func (f *ChildWait) needs() (*time.Time, []string, string) {
	return nil, []string{store.GroupEvent(f.pos)}, "waiting for child run " + f.runID
}

// childRunID derives a child's run ID from its parent's: "<parent>.<position>",
// and "<parent>.<position>.<index>" for the items of a Map.
// ChildRunID is childRunID, for the client (Reset tells a Map's children apart).
func ChildRunID(parent string, pos, index int) string { return childRunID(parent, pos, index) }

func childRunID(parent string, pos, index int) string {
	var b strings.Builder
	b.WriteString(parent)
	b.WriteByte('.')
	b.WriteString(strconv.Itoa(pos))
	if index >= 0 {
		b.WriteByte('.')
		b.WriteString(strconv.Itoa(index))
	}
	return b.String()
}

// children reads the child runs started at pos; a store failure abandons the run.
func (rs *RunState) children(pos int) []*store.Run {
	runs, err := rs.e.cfg.Store.RunChildren(rs.ctx, &store.RunChildrenParams{Namespace: rs.run.Namespace, Parent: rs.run.ID, Position: pos})
	if err != nil {
		rs.requestUnwind(unwindAbandon, fmt.Errorf("reading child runs: %w", err), nil, "")
		rs.stopNow()
	}
	return runs
}
