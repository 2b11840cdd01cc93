package trellis

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/trellis-dev/trellis/internal/engine"
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

// Unwrap returns the sentinel of the child's recorded error type
// (ErrDeadlineExceeded, ErrStepTimeout, ErrPayloadTooLarge, ErrEventTimeout,
// ErrApprovalTimeout), if any. A cancelled child does not unwrap to ErrCancelled:
// that sentinel means the workflow itself was cancelled.
func (e *ChildError) Unwrap() error {
	if e.Type == engine.TypeCancelled {
		return nil
	}
	return sentinelFor(e.Type)
}

// ChildFuture is a child run started by a workflow.
type ChildFuture[Out any] struct {
	w engine.ChildWait
}

// ChildAsync starts a child run of wf with input in and returns at once. The
// child is created with the parent's next checkpoint, with a run ID derived from
// the parent's, so a replay never starts it twice. Cancelling the parent cancels
// its children (unless detached).
func ChildAsync[In, Out any](wc *Context, wf *Workflow[In, Out], in In, opts ...ChildOptions) *ChildFuture[Out] {
	f := &ChildFuture[Out]{}
	o, err := oneOption("trellis.ChildAsync", opts)
	if err != nil {
		f.w.Refuse(err)
		return f
	}
	ns := wc.rs.Run().Namespace
	wc.rs.StartChild(&f.w, engine.ChildSpec{Workflow: wf.Name(), Input: in, Detached: o.Detached,
		Params: func(runID string, input []byte) *store.RunCreateParams {
			// The child's spans join the parent's trace.
			return runParams(ns, wf.definition(), runID, input, StartOptions{ID: o.ID, Queue: o.Queue, Priority: o.Priority},
				traceParentOf(wc.rs.AttemptContext()))
		}}, wc.detached)
	return f
}

// Child starts a child run of wf and waits for its result; the parent holds no
// worker while it waits. A child that fails or is cancelled returns a *ChildError.
func Child[In, Out any](wc *Context, wf *Workflow[In, Out], in In, opts ...ChildOptions) (Out, error) {
	if len(opts) > 1 {
		var zero Out
		_, err := oneOption("trellis.Child", opts)
		return zero, err
	}
	return ChildAsync(wc, wf, in, opts...).Get(wc)
}

// RunID returns the child's run ID.
func (f *ChildFuture[Out]) RunID() string { return f.w.RunID() }

// Get waits for the child to finish and returns its result.
func (f *ChildFuture[Out]) Get(wc *Context) (Out, error) {
	var v Out
	switch {
	case f.w.Err() != nil:
		return v, f.w.Err()
	case f.w.Detached():
		return v, ErrDetachedChild
	}
	if err := wc.rs.Await(&f.w, wc.detached); err != nil {
		return v, err
	}
	op := f.w.Op()
	if op.Error != nil {
		ce := &ChildError{RunID: f.w.RunID(), Message: op.Error.Message}
		_ = json.Unmarshal(op.Result, ce)
		return v, ce
	}
	if err := wc.rs.Codec().Unmarshal(op.Result, &v); err != nil {
		return v, fmt.Errorf("decoding result of child run %s: %w", f.w.RunID(), err)
	}
	return v, nil
}

func (f *ChildFuture[Out]) waiterOf() engine.Waiter { return &f.w }

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

// Unwrap returns a *ChildError for each failed item, so errors.As and errors.Is
// look into them.
func (e *MapError) Unwrap() []error {
	errs := make([]error, len(e.Items))
	for i, it := range e.Items {
		errs[i] = &ChildError{RunID: it.RunID, Status: it.Status, Message: it.Message, Type: it.Type}
	}
	return errs
}

func mapError(items []engine.ItemError) *MapError {
	e := &MapError{Items: make([]ItemError, len(items))}
	for i, it := range items {
		e.Items[i] = ItemError{Index: it.Index, RunID: it.RunID, Status: Status(it.Status), Message: it.Message, Type: it.Type}
	}
	return e
}

// Map runs wf once per item, each as its own child run, at most
// opts.MaxConcurrency at a time, and returns the results in item order. All
// children are created with one checkpoint; the store releases held children as
// others finish and wakes the parent once, when the group ends, so the parent's
// history holds one op whatever the number of items. On failure it returns a
// *MapError (with CollectErrors, alongside the results of the items that
// succeeded).
func Map[In, Out any](wc *Context, wf *Workflow[In, Out], items []In, opts ...MapOptions) ([]Out, error) {
	o, err := oneOption("trellis.Map", opts)
	if err != nil {
		return nil, err
	}
	rs := wc.rs
	ns := rs.Run().Namespace
	var (
		def *definition // built once, only when the children are created
		tp  string      // the children's trace parent: the attempt's span
	)
	runs, failed, err := rs.Map(engine.MapSpec{Workflow: wf.Name(), Items: len(items), MaxConcurrency: o.MaxConcurrency,
		CollectErrors: o.CollectErrors,
		Encode:        func(i int) ([]byte, error) { return rs.Encode(items[i]) },
		Params: func(runID string, input []byte) *store.RunCreateParams {
			if def == nil {
				def, tp = wf.definition(), traceParentOf(rs.AttemptContext())
			}
			return runParams(ns, def, runID, input, StartOptions{Queue: o.Queue, Priority: o.Priority}, tp)
		}}, wc.detached)
	switch {
	case err != nil:
		return nil, err
	case len(failed) > 0:
		return nil, mapError(failed)
	}
	out := make([]Out, len(items))
	var bad []engine.ItemError
	for i, r := range runs {
		if r.Status != store.StatusSucceeded {
			bad = append(bad, engine.ItemFailure(i, r))
			continue
		}
		if err := rs.Codec().Unmarshal(r.Output, &out[i]); err != nil {
			return nil, fmt.Errorf("decoding result of map item %d (run %s): %w", i, r.ID, err)
		}
	}
	if len(bad) > 0 {
		return out, mapError(bad)
	}
	return out, nil
}
