package trellis

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// ErrDetachedChild: Get was called on a detached child, which the parent does
// not wait for.
var ErrDetachedChild = errors.New("detached child: the parent does not wait for it")

// ChildOptions configure a child run.
type ChildOptions struct {
	// ID is the child's workflow ID; default its run ID, "<parent run ID>.<position>".
	ID string
	// Queue and Priority default to the child workflow's queue and 0.
	Queue    string
	Priority int
	// Detached: the parent does not wait for the child, and cancelling the parent
	// does not cancel it.
	Detached bool
}

// ChildError is the error of a child run that did not succeed.
type ChildError struct {
	RunID   string
	Status  Status
	Message string
	Type    string
}

func (e *ChildError) Error() string {
	return fmt.Sprintf("child run %s %s: %s", e.RunID, e.Status, e.Message)
}

// ChildFuture is a child run started by a workflow.
type ChildFuture[Out any] struct {
	wc       *Context
	pos      int
	runID    string
	detached bool
	op       *store.Op // the recorded outcome, once settled
	err      error     // the child could not be started
}

type childState struct {
	RunID string `json:"run_id"`
}

// ChildAsync starts a child run of wf with input in and returns at once. The
// child is created with the parent's next checkpoint, with a run ID derived from
// the parent's, so a replay never starts it twice. Cancelling the parent cancels
// its children (unless detached).
func ChildAsync[In, Out any](wc *Context, wf *Workflow[In, Out], in In, opts ...ChildOptions) *ChildFuture[Out] {
	var o ChildOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	rs := wc.rs
	rs.checkUnwind()
	pos, rec := rs.next(store.OpChild, wf.Name())
	f := &ChildFuture[Out]{wc: wc, pos: pos, runID: childRunID(rs.run.ID, pos, -1), detached: o.Detached}
	if rec != nil {
		if rec.Done && !o.Detached {
			f.op = rec
		}
		return f
	}
	if err := rs.interrupted(wc.detached); err != nil {
		f.err = err
		return f
	}
	input, err := rs.encode(in)
	if err != nil {
		f.err = fmt.Errorf("encoding input of child %s: %w", wf.Name(), err)
		return f
	}
	def := wf.definition()
	p := runParams(rs.run.Namespace, def, f.runID, input, StartOptions{ID: o.ID, Queue: o.Queue, Priority: o.Priority})
	rs.queueWait(func(w *queued) {
		w.children = append(w.children, &store.ChildGroup{Position: pos, Detached: o.Detached, Runs: []*store.RunCreateParams{p}})
	})
	b, _ := json.Marshal(childState{RunID: f.runID})
	rs.recordWait(pos, store.OpChild, wf.Name(), o.Detached, b, nil)
	return f
}

// Child starts a child run of wf and waits for its result; the parent holds no
// worker while it waits. A child that fails or is cancelled returns a *ChildError.
func Child[In, Out any](wc *Context, wf *Workflow[In, Out], in In, opts ...ChildOptions) (Out, error) {
	return ChildAsync(wc, wf, in, opts...).Get(wc)
}

// RunID returns the child's run ID.
func (f *ChildFuture[Out]) RunID() string { return f.runID }

// Get waits for the child to finish and returns its result.
func (f *ChildFuture[Out]) Get(wc *Context) (Out, error) {
	var v Out
	switch {
	case f.err != nil:
		return v, f.err
	case f.detached:
		return v, ErrDetachedChild
	}
	if err := await(wc, f); err != nil {
		return v, err
	}
	if f.op.Error != nil {
		ce := &ChildError{RunID: f.runID, Message: f.op.Error.Message}
		_ = json.Unmarshal(f.op.Result, ce)
		return v, ce
	}
	if err := f.wc.rs.codec.Unmarshal(f.op.Result, &v); err != nil {
		return v, fmt.Errorf("decoding result of child run %s: %w", f.runID, err)
	}
	return v, nil
}

func (f *ChildFuture[Out]) waiterOf() waiter { return f }
func (f *ChildFuture[Out]) settled() bool    { return f.op != nil || f.err != nil || f.detached }

func (f *ChildFuture[Out]) try() bool {
	rs := f.wc.rs
	if rs.takeEvent(store.GroupEvent(f.pos)) == nil {
		return false
	}
	runs := rs.children(f.pos)
	if len(runs) != 1 {
		rs.requestUnwind(unwindAbandon, fmt.Errorf("child run %s: the store holds %d children at position %d", f.runID, len(runs), f.pos), nil, "")
		rs.stopNow()
	}
	child := runs[0]
	if child.Status == StatusSucceeded {
		f.op = rs.recordWait(f.pos, store.OpChild, child.Workflow, true, child.Output, nil)
		return true
	}
	ce := childError(child)
	b, _ := json.Marshal(ce)
	f.op = rs.recordWait(f.pos, store.OpChild, child.Workflow, true, b, &typedError{msg: ce.Error(), typ: "child_" + string(child.Status)})
	return true
}

func (f *ChildFuture[Out]) needs() (*time.Time, []string, string) {
	return nil, []string{store.GroupEvent(f.pos)}, "waiting for child run " + f.runID
}

func childError(r *store.Run) *ChildError {
	ce := &ChildError{RunID: r.ID, Status: r.Status}
	if r.Error != nil {
		ce.Message, ce.Type = r.Error.Message, r.Error.Type
	}
	return ce
}

// childRunID derives a child's run ID from its parent's: "<parent>.<position>",
// and "<parent>.<position>.<index>" for the items of a Map.
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
func (rs *runState) children(pos int) []*store.Run {
	runs, err := rs.c.store.RunChildren(rs.ctx, &store.RunChildrenParams{Namespace: rs.run.Namespace, Parent: rs.run.ID, Position: pos})
	if err != nil {
		rs.requestUnwind(unwindAbandon, fmt.Errorf("reading child runs: %w", err), nil, "")
		rs.stopNow()
	}
	return runs
}

// MapOptions configure Map.
type MapOptions struct {
	// MaxConcurrency caps the children pending or running at once; 0 means no cap.
	MaxConcurrency int
	// CollectErrors waits for every child and reports all failures; by default
	// the first failure cancels the remaining children and ends the Map.
	CollectErrors bool
	// Queue and Priority of the children; default the workflow's queue and 0.
	Queue    string
	Priority int
}

// ItemError is the failure of one item of a Map.
type ItemError struct {
	Index   int    `json:"index"`
	RunID   string `json:"run_id"`
	Status  Status `json:"status"`
	Message string `json:"message"`
	Type    string `json:"type,omitempty"`
}

// MapError lists the items of a Map that did not succeed, in item order (with
// fail-fast, those known when the Map ended).
type MapError struct {
	Items []ItemError
}

func (e *MapError) Error() string {
	if len(e.Items) == 0 {
		return "map failed"
	}
	first := e.Items[0]
	msg := fmt.Sprintf("map: item %d (run %s) %s: %s", first.Index, first.RunID, first.Status, first.Message)
	if n := len(e.Items) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more)", n)
	}
	return msg
}

// mapState is what a Map op records: the group's outcome and, when it failed,
// the failed items.
type mapState struct {
	Items   int                 `json:"items"`
	Outcome *store.GroupOutcome `json:"outcome,omitempty"`
	Failed  []ItemError         `json:"failed,omitempty"`
}

// Map runs wf once per item, each as its own child run, at most
// opts.MaxConcurrency at a time, and returns the results in item order. All
// children are created with one checkpoint; the store releases held children as
// others finish and wakes the parent once, when the group ends, so the parent's
// history holds one op whatever the number of items. On failure it returns a
// *MapError (with CollectErrors, alongside the results of the items that
// succeeded).
func Map[In, Out any](wc *Context, wf *Workflow[In, Out], items []In, opts ...MapOptions) ([]Out, error) {
	var o MapOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	rs := wc.rs
	rs.checkUnwind()
	pos, rec := rs.next(store.OpChild, wf.Name())
	m := &mapWait{wc: wc, pos: pos, name: wf.Name()}
	if rec == nil {
		if err := rs.interrupted(wc.detached); err != nil {
			return nil, err
		}
		def := wf.definition()
		group := &store.ChildGroup{Position: pos, MaxConcurrency: o.MaxConcurrency, FailFast: !o.CollectErrors,
			Runs: make([]*store.RunCreateParams, len(items))}
		for i, item := range items {
			input, err := rs.encode(item)
			if err != nil {
				return nil, fmt.Errorf("encoding item %d of map %s: %w", i, wf.Name(), err)
			}
			group.Runs[i] = runParams(rs.run.Namespace, def, childRunID(rs.run.ID, pos, i), input, StartOptions{Queue: o.Queue, Priority: o.Priority})
		}
		if len(items) > 0 {
			rs.queueWait(func(w *queued) { w.children = append(w.children, group) })
		}
		m.state = mapState{Items: len(items)}
		b, _ := json.Marshal(m.state)
		rs.recordWait(pos, store.OpChild, wf.Name(), len(items) == 0, b, nil)
		m.done = len(items) == 0
	} else {
		if err := json.Unmarshal(rec.Result, &m.state); err != nil {
			rs.block(&NonDeterminismError{Position: pos, Recorded: describe(rec.Kind, rec.Name) + " with unreadable state", Requested: "map of " + wf.Name()})
		}
		m.done = rec.Done
		if m.state.Items != len(items) {
			rs.block(&NonDeterminismError{Position: pos, Recorded: fmt.Sprintf("map of %d items", m.state.Items),
				Requested: fmt.Sprintf("map of %d items", len(items))})
		}
	}
	if err := await(wc, m); err != nil {
		return nil, err
	}
	if !o.CollectErrors && len(m.state.Failed) > 0 {
		return nil, &MapError{Items: m.state.Failed}
	}
	out := make([]Out, len(items))
	if len(items) == 0 {
		return out, nil
	}
	runs := rs.children(pos)
	if len(runs) != len(items) {
		rs.requestUnwind(unwindAbandon, fmt.Errorf("map at position %d: the store holds %d children for %d items", pos, len(runs), len(items)), nil, "")
		rs.stopNow()
	}
	var failed []ItemError
	for i, r := range runs {
		if r.Status != StatusSucceeded {
			failed = append(failed, itemError(i, r))
			continue
		}
		if err := rs.codec.Unmarshal(r.Output, &out[i]); err != nil {
			return nil, fmt.Errorf("decoding result of map item %d (run %s): %w", i, r.ID, err)
		}
	}
	if len(failed) > 0 {
		return out, &MapError{Items: failed}
	}
	return out, nil
}

func itemError(i int, r *store.Run) ItemError {
	ie := ItemError{Index: i, RunID: r.ID, Status: r.Status}
	if r.Error != nil {
		ie.Message, ie.Type = r.Error.Message, r.Error.Type
	}
	return ie
}

// mapWait is the wait of a Map for its group's end.
type mapWait struct {
	wc    *Context
	pos   int
	name  string
	state mapState
	done  bool
}

func (m *mapWait) settled() bool { return m.done }

func (m *mapWait) try() bool {
	rs := m.wc.rs
	e := rs.takeEvent(store.GroupEvent(m.pos))
	if e == nil {
		return false
	}
	var outcome store.GroupOutcome
	_ = json.Unmarshal(e.Payload, &outcome)
	m.state.Outcome = &outcome
	if outcome.Succeeded < outcome.Total {
		// Fail fast: keep what the workflow sees now; later changes of the
		// children (cancellations under way) must not change a replay.
		for i, r := range rs.children(m.pos) {
			if r.Status.Terminal() && r.Status != StatusSucceeded {
				m.state.Failed = append(m.state.Failed, itemError(i, r))
			}
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
