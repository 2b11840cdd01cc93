package trellistest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/clock"
	"github.com/trellis-dev/trellis/internal/engine"
	"github.com/trellis-dev/trellis/internal/testkit"
	"github.com/trellis-dev/trellis/internal/worker"
	"github.com/trellis-dev/trellis/store"
)

// ErrReplayOutcome is wrapped by the error of a replay whose workflow code
// finished the run otherwise than the recorded run finished (another status,
// output or error), or stopped where the recorded run went on.
var ErrReplayOutcome = errors.New("replay outcome differs from the recorded run")

// LoadHistory reads a history file in the trellis.history/v1 format (as
// `trellis runs history RUN --json` prints it).
func LoadHistory(path string) (*trellis.RecordedHistory, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("loading history: %w", err)
	}
	h, err := trellis.ParseHistory(b)
	if err != nil {
		return nil, fmt.Errorf("loading history %s: %w", path, err)
	}
	return h, nil
}

// Replay replays a recorded history against the workflows' code (one of them
// must be the run's workflow) and fails the test if the code diverges: see
// CheckReplay.
func Replay(t TB, h *trellis.RecordedHistory, wfs ...trellis.Registrable) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := CheckReplay(ctx, h, wfs...); err != nil {
		t.Fatalf("replaying run %s of %s: %v", h.Run.ID, h.Run.Workflow, err)
	}
}

// CheckReplay replays a recorded history against the workflows' code with the
// engine and no store: the workflow function runs from the start, each op it
// asks for is matched against the recorded op at its position and returns the
// recorded outcome; no step function runs. It returns nil when the code agrees
// with the history, and otherwise:
//
//   - a *trellis.NonDeterminismError when the code asks for another op than the
//     history holds at a position (its Position, Recorded and Requested say
//     which), or, for a finished run, for an op beyond the end of the history;
//   - an error wrapping ErrReplayOutcome when the code finishes a finished run
//     otherwise (status, output or error), or waits where it finished.
//
// A history of a run not finished when exported replays up to its end; what
// the code asks for after that is not checked. Payloads are decoded with the
// JSON codec.
func CheckReplay(ctx context.Context, h *trellis.RecordedHistory, wfs ...trellis.Registrable) error {
	r, err := newReplayer(h)
	if err != nil {
		return err
	}
	defs := map[string]*engine.Definition{}
	for _, wf := range wfs {
		if d, ok := testkit.Definition(wf); ok {
			defs[d.Name] = d
		}
	}
	if defs[h.Run.Workflow] == nil {
		return fmt.Errorf("replaying run %s: workflow %q is not among the workflows given", h.Run.ID, h.Run.Workflow)
	}
	eng, err := engine.New(engine.Config{
		Store: r, Codec: trellis.JSONCodec{}, Clock: clock.NewFake(r.at),
		MaxPayloadBytes: trellis.DefaultMaxPayloadBytes, MaxInlineBackoff: time.Nanosecond,
		CheckpointTimeout: time.Minute, ErrorType: testkit.ErrorType,
		Lookup:       func(name string) (*engine.Definition, bool) { d, ok := defs[name]; return d, ok },
		StepOverride: r.stepOverride, OnBlock: r.onBlock,
	})
	if err != nil {
		return err
	}
	return r.replay(ctx, eng)
}

// replay executes the run once and judges the outcome.
func (r *replayer) replay(ctx context.Context, eng *engine.Engine) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	r.stop = cancel
	ctl := worker.NewControl(store.Lease{Namespace: r.run.Namespace, RunID: r.run.ID, Token: 1})
	if r.run.Status == store.StatusCancelled || r.run.CancelRequested {
		ctl.RequestCancel()
	}
	eng.Execute(ctx, &store.ClaimedRun{Run: r.run, LeaseToken: 1, History: r.ops}, ctl)
	if r.failure != nil {
		return r.failure
	}
	if err := context.Cause(ctx); err != nil && !errors.Is(err, errReplayEnd) {
		return fmt.Errorf("replaying run %s: %w", r.run.ID, err)
	}
	if !r.finished() {
		return nil
	}
	return r.compareOutcome()
}

// errReplayEnd stops a replay that reached the end of an unfinished run's history.
var errReplayEnd = errors.New("end of the recorded history")

// replayer is the engine's store during a replay: it serves the recorded
// history and judges what the engine writes.
type replayer struct {
	mu       sync.Mutex // failure, final: async steps run on their own goroutines
	h        *trellis.RecordedHistory
	run      *store.Run
	ops      []*store.Op
	recorded map[int]*store.Op
	at       time.Time // the replay's clock reading
	stop     context.CancelCauseFunc
	failure  error
	final    *store.CheckpointParams
}

func newReplayer(h *trellis.RecordedHistory) (*replayer, error) {
	if h == nil || h.Format != trellis.HistoryFormat {
		return nil, fmt.Errorf("replaying: %w", trellis.ErrHistoryFormat)
	}
	hr := h.Run
	r := &replayer{h: h, recorded: map[int]*store.Op{}, at: hr.CreatedAt,
		run: &store.Run{Namespace: hr.Namespace, ID: hr.ID, WorkflowID: hr.WorkflowID, Workflow: hr.Workflow,
			Queue: hr.Queue, Version: hr.Version, Status: store.StatusRunning, Input: hr.Input,
			Deadline: hr.Deadline, CreatedAt: hr.CreatedAt, StartedAt: hr.StartedAt, ParentID: hr.ParentID,
			CancelRequested: hr.Status == trellis.StatusCancelled},
	}
	for _, ho := range h.Ops {
		op := storeOp(ho)
		r.ops = append(r.ops, op)
		r.recorded[op.Position] = op
		r.at = latest(r.at, op.StartedAt, op.FinishedAt)
	}
	if hr.FinishedAt != nil {
		r.at = latest(r.at, *hr.FinishedAt, nil)
	}
	return r, nil
}

func latest(t time.Time, u time.Time, v *time.Time) time.Time {
	if u.After(t) {
		t = u
	}
	if v != nil && v.After(t) {
		t = *v
	}
	return t
}

func storeOp(h trellis.HistoryOp) *store.Op {
	op := &store.Op{Position: h.Position, Kind: store.OpKind(h.Kind), Name: h.Name, Done: h.Done, Result: h.Result,
		Error: storeError(h.Error), Attempts: h.Attempts, StartedAt: h.StartedAt, FinishedAt: h.FinishedAt,
		AttemptStartedAt: h.AttemptStartedAt}
	for _, a := range h.AttemptLog {
		op.AttemptLog = append(op.AttemptLog, store.Attempt{Position: h.Position, Attempt: a.Attempt,
			Error: *storeError(&a.Error), StartedAt: a.StartedAt, FinishedAt: a.FinishedAt, Outcome: a.Outcome})
	}
	return op
}

func storeError(e *trellis.ErrorInfo) *store.ErrorInfo {
	if e == nil {
		return nil
	}
	return &store.ErrorInfo{Message: e.Message, Type: e.Type, NonRetryable: e.NonRetryable}
}

func (r *replayer) finished() bool { return r.h.Run.Status.Terminal() }

// fail records the first divergence and stops the replay.
func (r *replayer) fail(err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failure == nil {
		r.failure = err
	}
	r.stop(errReplayEnd)
	return err
}

// beyond handles an op the code asks for past the recorded history: a
// divergence for a finished run, the end of the replay otherwise.
func (r *replayer) beyond(pos int, requested string) error {
	if !r.finished() {
		r.stop(errReplayEnd)
		return errReplayEnd
	}
	return r.fail(&trellis.NonDeterminismError{Position: pos,
		Recorded: fmt.Sprintf("the end of the history (the run %s)", r.h.Run.Status), Requested: requested})
}

// Checkpoint implements engine.Store: it accepts what the history holds and
// judges the rest.
func (r *replayer) Checkpoint(_ context.Context, p *store.CheckpointParams) (*store.CheckpointResult, error) {
	for _, op := range p.Ops {
		if rec := r.recorded[op.Position]; rec == nil || (!rec.Done && op.Done) {
			return nil, r.beyond(op.Position, engine.Describe(op.Kind, op.Name))
		}
	}
	switch {
	case p.Status.Terminal():
		r.mu.Lock()
		r.final = p
		r.mu.Unlock()
	case p.Status == store.StatusBlocked:
		return nil, r.fail(fmt.Errorf("replaying run %s: blocked: %s", r.run.ID, p.Error.Message))
	case p.Status != store.StatusRunning && r.finished():
		return nil, r.fail(fmt.Errorf("%w: the recorded run %s, the replayed code waits (%s)", ErrReplayOutcome, r.h.Run.Status, p.WaitReason))
	case p.Status != store.StatusRunning:
		r.stop(errReplayEnd)
	}
	return &store.CheckpointResult{At: r.at}, nil
}

// LeaseRelease implements engine.Store.
func (r *replayer) LeaseRelease(context.Context, *store.LeaseReleaseParams) error { return nil }

// RunChildren implements engine.Store from the children recorded with child ops.
func (r *replayer) RunChildren(_ context.Context, p *store.RunChildrenParams) ([]*store.Run, error) {
	for _, op := range r.h.Ops {
		if op.Position != p.Position {
			continue
		}
		runs := make([]*store.Run, len(op.Children))
		for i, c := range op.Children {
			runs[i] = &store.Run{Namespace: r.run.Namespace, ID: c.ID, Workflow: c.Workflow, Status: store.Status(c.Status),
				Output: c.Output, Error: storeError(c.Error), ParentID: r.run.ID}
		}
		return runs, nil
	}
	return nil, nil
}

// onBlock records the non-determinism error that blocks the run.
func (r *replayer) onBlock(_ *store.Run, err error) { _ = r.fail(err) }

// stepOverride makes every step attempt end the replay: a step the history
// holds as done never runs, so an attempt is an op past the history.
func (r *replayer) stepOverride(name string, fnType reflect.Type) (any, bool) {
	return stepStopper(fnType, func(ctx context.Context) error {
		return r.beyond(engine.StepInfo(ctx).Position, engine.Describe(store.OpStep, name))
	}), true
}

// compareOutcome compares the replayed outcome of a finished run with the recorded one.
func (r *replayer) compareOutcome() error {
	rec, got := r.h.Run, r.final
	if got == nil {
		return fmt.Errorf("%w: the recorded run %s, the replay stopped before the end", ErrReplayOutcome, rec.Status)
	}
	if got.Status != store.Status(rec.Status) {
		return fmt.Errorf("%w: the recorded run %s%s, the replayed code %s%s", ErrReplayOutcome,
			rec.Status, errSuffix(storeError(rec.Error)), got.Status, errSuffix(got.Error))
	}
	if got.Status == store.StatusSucceeded && !sameJSON(got.Output, rec.Output) {
		return fmt.Errorf("%w: the recorded output is %s, the replayed output %s", ErrReplayOutcome, rec.Output, got.Output)
	}
	if want := storeError(rec.Error); want != nil && got.Error != nil && firstLine(want.Message) != firstLine(got.Error.Message) {
		return fmt.Errorf("%w: the recorded error is %q, the replayed error %q", ErrReplayOutcome, want.Message, got.Error.Message)
	}
	return nil
}

func errSuffix(e *store.ErrorInfo) string {
	if e == nil {
		return ""
	}
	return " (" + e.Message + ")"
}

// firstLine drops what follows the first line (a panic's stack).
func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

// sameJSON compares payloads as JSON values when both are JSON, else as bytes.
func sameJSON(a, b []byte) bool {
	var x, y bytes.Buffer
	if json.Compact(&x, a) != nil || json.Compact(&y, b) != nil {
		return bytes.Equal(a, b)
	}
	return bytes.Equal(x.Bytes(), y.Bytes())
}
