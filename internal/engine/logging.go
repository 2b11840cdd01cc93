package engine

import (
	"context"
	"log/slog"
)

// Logger returns the run's logger for workflow code: its lines carry the run ID,
// the workflow ID, the workflow and the run's claim number (run_attempt), and are dropped while the run replays ops its
// history holds, so that a line is written once, not at every replay.
func (rs *RunState) Logger() *slog.Logger {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.logger == nil {
		h := &replayHandler{inner: rs.log().Handler(), rs: rs}
		rs.logger = slog.New(h).With("workflow_id", rs.run.WorkflowID)
	}
	return rs.logger
}

// replaying reports whether the workflow is still re-executing ops its history
// holds: the next position is at or before the last recorded one.
func (rs *RunState) replaying() bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.nextPos <= rs.lastPos
}

// StepLogger returns the logger for a step attempt's context: the run's logger
// with the step's name and attempt. A step that runs is never a replay, so none
// of its lines is dropped. Outside a step it returns nil.
func StepLogger(ctx context.Context) *slog.Logger {
	v, _ := ctx.Value(stepInfoKey{}).(*stepValue)
	if v == nil {
		return nil
	}
	return v.rs.log().With("workflow_id", v.rs.run.WorkflowID, "step", v.Step, "attempt", v.Attempt)
}

// replayHandler drops records while its run replays.
type replayHandler struct {
	inner slog.Handler
	rs    *RunState
}

func (h *replayHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return !h.rs.replaying() && h.inner.Enabled(ctx, l)
}

func (h *replayHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.rs.replaying() {
		return nil
	}
	return h.inner.Handle(ctx, r)
}

func (h *replayHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &replayHandler{inner: h.inner.WithAttrs(as), rs: h.rs}
}

func (h *replayHandler) WithGroup(name string) slog.Handler {
	return &replayHandler{inner: h.inner.WithGroup(name), rs: h.rs}
}
