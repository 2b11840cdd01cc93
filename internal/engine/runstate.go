package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/trellis-dev/trellis/internal/protocol"
	"github.com/trellis-dev/trellis/internal/worker"
	"github.com/trellis-dev/trellis/store"
)

// unwindKind says why a workflow's goroutine stops before its function returns.
type unwindKind int

const (
	unwindNone     unwindKind = iota
	unwindBlocked             // non-determinism: save blocked
	unwindSuspend             // a long wait: save waiting, release the run
	unwindHandBack            // worker shutdown: save pending
	unwindAbandon             // lease lost or store failing: write nothing more
	unwindFail                // fail the run with unwindErr (an at-most-once step's unknown outcome)
)

// RunState is one claimed run being executed: its history, the ops not yet
// checkpointed, and the signals that stop it. Ops of the workflow goroutine and of
// async steps share it, so its mutable fields are guarded by mu.
type RunState struct {
	e     *Engine
	codec Codec
	run   *store.Run
	lease store.Lease
	ctx   context.Context // done when the lease is lost or the worker stops hard
	// cancelCtx is ctx, also done (cause ErrCancelled) once the run is cancelled.
	cancelCtx context.Context
	ctl       *worker.Control
	// queueRetry is the default retry policy of the run's queue (nil: none).
	queueRetry *store.QueueRetry
	// limit is the run's payload limit: the engine's, or its queue's when
	// lower; limitOf says which, for errors.
	limit   int
	limitOf string
	// retry is the workflow's retry policy (Definition.Retry; nil: none).
	retry   *store.RunRetry
	history map[int]*store.Op
	lastPos int // highest recorded position, -1 when none

	// inbox holds the events the run had when claimed; consumed marks those an op
	// of this execution took.
	inbox    []*store.Event
	consumed map[int64]bool

	mu            sync.Mutex
	nextPos       int
	pending       queued          // writes for the next checkpoint
	openApprovals map[string]bool // approval requests of this run not yet decided
	kv            map[string][]byte
	cancelSeen    bool
	startPending  bool // run.started or run.resumed is still to be written (see addStarted)
	replayed      int  // the ops of the history this execution replays
	deadlineHit   bool
	panicked      bool
	unwind        unwindKind
	unwindErr     error      // blocked: the non-determinism error
	wakeAt        *time.Time // suspend: when to resume (nil: only on an event)
	waitEvents    []string   // suspend: events that resume it
	waitReason    string
	unwinding     chan struct{} // closed when an unwind is requested
	logger        *slog.Logger  // Logger's, made on first use
	runLog        *slog.Logger  // log's, made with the run state

	ckMu  sync.Mutex // serialises checkpoints of this run, in order
	ckSeq int64      // the Seq of the lease's last checkpoint; guarded by ckMu
	// recorded is the run's history as this execution wrote it, for
	// checkProtocol (nil unless ProtocolViolation is set); guarded by ckMu.
	recorded *protocol.Recorded
	inflight sync.WaitGroup // async steps still executing
}

func newRunState(e *Engine, cr *store.ClaimedRun, ctx context.Context, ctl *worker.Control) *RunState {
	rs := &RunState{
		e: e, codec: e.cfg.Codec, run: cr.Run, ctx: ctx, ctl: ctl,
		lease:      cr.Lease(),
		history:    make(map[int]*store.Op, len(cr.History)),
		lastPos:    -1,
		kv:         make(map[string][]byte),
		unwinding:  make(chan struct{}),
		inbox:      cr.Inbox,
		consumed:   make(map[int64]bool),
		queueRetry: cr.QueueRetry,
	}
	rs.limit, rs.limitOf = e.payloadLimit(cr)
	rs.runLog = e.cfg.Logger
	if e.cfg.Logger.Handler() != slog.DiscardHandler { // no attributes for lines nobody reads
		rs.runLog = runLogger(e.cfg.Logger, cr.Run)
	}
	for _, op := range cr.History {
		rs.history[op.Position] = op
		rs.lastPos = max(rs.lastPos, op.Position)
	}
	rs.startPending, rs.replayed = true, len(cr.History)
	if ProtocolViolation != nil {
		rs.recorded = protocol.NewRecorded(cr.History, cr.Run.CancelRequested)
	}
	return rs
}

func (rs *RunState) now() time.Time { return rs.e.cfg.Clock.Now() }

// runLogger is l with the keys every line about a run carries: run_id,
// workflow and run_attempt (the run's claim count). Lines about a step add
// step and attempt (the step's attempt); docs/observability.md lists them.
func runLogger(l *slog.Logger, run *store.Run) *slog.Logger {
	return l.With("run_id", run.ID, "workflow", run.Workflow, "run_attempt", run.Attempts)
}

// log is the engine's logger with the run's ID, workflow and claim number
// (run_attempt) on every line.
func (rs *RunState) log() *slog.Logger { return rs.runLog }

func (rs *RunState) errorInfo(err error) *store.ErrorInfo { return errorInfo(err, rs.e.cfg.ErrorType) }

// Run returns the run being executed, as claimed. Callers must not modify it.
func (rs *RunState) Run() *store.Run { return rs.run }

// AttemptContext returns the context the attempt was executed with: it holds
// what the workflow interceptors put in it (the attempt's trace span, say).
func (rs *RunState) AttemptContext() context.Context { return rs.ctx }

// Codec returns the codec of the run's values.
func (rs *RunState) Codec() Codec { return rs.codec }

// Cancelled reports whether the run's cancellation is known.
func (rs *RunState) Cancelled() bool {
	select {
	case <-rs.ctl.CancelRequested():
		return true
	default:
		return false
	}
}

// next reserves the next position for an op of kind/name and returns the recorded
// op there, if any. A recorded op of another kind or name stops the run as blocked.
func (rs *RunState) next(kind store.OpKind, name string) (int, *store.Op) {
	rs.mu.Lock()
	pos := rs.nextPos
	rs.nextPos++
	rs.mu.Unlock()
	rec := rs.history[pos]
	if rec != nil && (rec.Kind != kind || rec.Name != name) {
		rs.block(&NonDeterminismError{Position: pos, Recorded: describe(rec.Kind, rec.Name), Requested: describe(kind, name)})
	}
	return pos, rec
}

// Describe names an op for people, as errors show it: kind and quoted name.
func Describe(kind store.OpKind, name string) string { return describe(kind, name) }

func describe(kind store.OpKind, name string) string {
	if name == "" {
		return string(kind)
	}
	return fmt.Sprintf("%s %q", kind, name)
}

// record queues a completed op (and its run-store write) for the next checkpoint.
func (rs *RunState) record(op *store.Op, kv *store.KVWrite) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.pending.ops = append(rs.pending.ops, op)
	if kv != nil {
		rs.pending.kv = append(rs.pending.kv, *kv)
	}
}

// recordAttempt queues a failed attempt and the step's in-progress op.
func (rs *RunState) recordAttempt(op *store.Op, att store.Attempt, ev store.StreamWrite) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.pending.ops = append(rs.pending.ops, op)
	rs.pending.atts = append(rs.pending.atts, att)
	rs.pending.stream = append(rs.pending.stream, ev)
}

// flush checkpoints the queued ops with the run still running. It is called before
// every side effect, so a step never starts before what preceded it is durable.
func (rs *RunState) flush() error {
	if rs.onlyDerivable(false) {
		return nil
	}
	_, err := rs.checkpoint(&store.CheckpointParams{Status: store.StatusRunning}, false)
	return err
}

// flushBeforeSleep checkpoints what precedes a sleep in place, so that a crash
// during the sleep does not run a step again. Timers alone need no checkpoint: a
// replay after a crash starts them anew.
func (rs *RunState) flushBeforeSleep() {
	if rs.onlyDerivable(true) {
		return
	}
	if _, err := rs.checkpoint(&store.CheckpointParams{Status: store.StatusRunning}, false); err != nil {
		rs.requestUnwind(flushFailure(err), err, nil, "")
		rs.stopNow()
	}
}

// onlyDerivable reports whether everything queued would be recorded the same way
// by a replay after a crash, so a step need not wait for it to be durable: fired
// timers (the clock only moves on) and events taken from the inbox (they stay
// there, oldest first, until consumed). It goes with the step's own checkpoint.
// With pendingTimers, timers not yet fired count too (before a sleep in place).
func (rs *RunState) onlyDerivable(pendingTimers bool) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	q := rs.pending
	if len(q.atts) > 0 || len(q.kv) > 0 || len(q.noEvents) > 0 || len(q.children) > 0 ||
		len(q.approvals) > 0 || len(q.expire) > 0 || len(q.stream) > 0 {
		return false
	}
	for _, op := range q.ops {
		switch {
		case op.Kind == store.OpTimer && (op.Done || pendingTimers):
		case op.Kind == store.OpEvent && op.Done && op.Error == nil:
		default:
			return false
		}
	}
	return true
}

// checkpoint saves the queued ops, attempts and run-store writes with the given state.
// With force unset it skips the call when nothing is queued.
func (rs *RunState) checkpoint(p *store.CheckpointParams, force bool) (*store.CheckpointResult, error) {
	rs.ckMu.Lock()
	defer rs.ckMu.Unlock()
	if !rs.prepareCheckpoint(p, force) {
		return &store.CheckpointResult{}, nil
	}
	// A checkpoint must not be abandoned half-way by a cancelled run context: the
	// store call itself is bounded by the lease.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(rs.ctx), rs.e.cfg.CheckpointTimeout)
	defer cancel()
	if rs.recorded != nil {
		rs.recorded.CancelRequested = rs.recorded.CancelRequested || rs.Cancelled()
		checkProtocol(rs.run, rs.recorded, p)
	}
	res, err := rs.e.cfg.Store.Checkpoint(ctx, p)
	if err != nil {
		if errors.Is(err, store.ErrLeaseLost) {
			// Fenced: another worker has the run. Its steps in flight stop
			// and none starts (the run's context ends), as when a heartbeat
			// reports the lease lost.
			rs.ctl.LeaseLost()
		}
		return nil, fmt.Errorf("checkpointing run %s: %w", rs.run.ID, err)
	}
	if rs.recorded != nil {
		rs.recorded.Apply(p)
	}
	if res.CancelRequested {
		rs.ctl.RequestCancel()
	}
	return res, nil
}

// prepareCheckpoint moves the queued writes into p, with the lease and the
// checkpoint's number, and reports whether there is anything to write (with
// force, always). The caller holds ckMu. It is a function of its own so that
// the queued writes it copies do not sit in checkpoint's frame while the store
// call runs below it: with them, checkpoint's frame was 700 bytes, and every
// workflow goroutine grew its stack from 4 to 8 KiB there.
//
//go:noinline
func (rs *RunState) prepareCheckpoint(p *store.CheckpointParams, force bool) bool {
	p.Lease = rs.lease
	q := rs.take()
	if !force && q.empty() {
		return false
	}
	// Checkpoints of a lease are numbered in order (ckMu makes them one at a
	// time), so that a store that retries one whose answer it lost applies it
	// once (store.CheckpointParams.Seq).
	rs.ckSeq++
	p.Seq = rs.ckSeq
	rs.addStarted(&q, p.Status)
	q.apply(p)
	return true
}

// queued are the writes waiting for the run's next checkpoint: ops, failed
// attempts and run-store writes, and the store writes of waits.
type queued struct {
	ops       []*store.Op
	atts      []store.Attempt
	kv        []store.KVWrite
	consume   []int64
	noEvents  []string
	children  []*store.ChildGroup
	approvals []*store.ApprovalRequest
	expire    []string
	stream    []store.StreamWrite
}

func (q *queued) empty() bool {
	return len(q.ops) == 0 && len(q.atts) == 0 && len(q.kv) == 0 && len(q.consume) == 0 &&
		len(q.noEvents) == 0 && len(q.children) == 0 && len(q.approvals) == 0 && len(q.expire) == 0 &&
		len(q.stream) == 0
}

// apply adds the writes to a checkpoint's parameters.
func (q *queued) apply(p *store.CheckpointParams) {
	p.Ops = append(p.Ops, q.ops...)
	p.Attempts = append(p.Attempts, q.atts...)
	p.KV = append(p.KV, q.kv...)
	p.Consume = append(p.Consume, q.consume...)
	p.NoEvents = append(p.NoEvents, q.noEvents...)
	p.Children = append(p.Children, q.children...)
	p.Approvals = append(p.Approvals, q.approvals...)
	p.ExpireApprovals = append(p.ExpireApprovals, q.expire...)
	p.Stream = append(q.stream[:len(q.stream):len(q.stream)], p.Stream...)
}

// take removes and returns the queued writes.
func (rs *RunState) take() queued {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	q := rs.pending
	rs.pending = queued{}
	return q
}

// requeue puts back writes taken for a checkpoint that did not commit, before
// those queued since.
func (rs *RunState) requeue(q queued) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	n := &rs.pending
	n.ops = append(q.ops[:len(q.ops):len(q.ops)], n.ops...)
	n.atts = append(q.atts[:len(q.atts):len(q.atts)], n.atts...)
	n.kv = append(q.kv[:len(q.kv):len(q.kv)], n.kv...)
	n.consume = append(q.consume[:len(q.consume):len(q.consume)], n.consume...)
	n.noEvents = append(q.noEvents[:len(q.noEvents):len(q.noEvents)], n.noEvents...)
	n.children = append(q.children[:len(q.children):len(q.children)], n.children...)
	n.approvals = append(q.approvals[:len(q.approvals):len(q.approvals)], n.approvals...)
	n.expire = append(q.expire[:len(q.expire):len(q.expire)], n.expire...)
	n.stream = append(q.stream[:len(q.stream):len(q.stream)], n.stream...)
}

// flushFailure is how a run stops when a checkpoint fails: handed back to be
// replayed when its inbox changed under a timed-out wait (store.ErrConflict),
// abandoned otherwise (the lease is lost or the store fails).
func flushFailure(err error) unwindKind {
	if errors.Is(err, store.ErrConflict) {
		return unwindHandBack
	}
	return unwindAbandon
}

// suspend stops the workflow goroutine to release the run until wakeAt (nil: no
// time) or one of events arrives, merging with other ops that suspend.
func (rs *RunState) suspend(wakeAt *time.Time, events []string, reason string) {
	rs.mu.Lock()
	if rs.unwind == unwindNone || rs.unwind == unwindSuspend {
		rs.waitEvents = append(rs.waitEvents, events...)
	}
	rs.mu.Unlock()
	rs.requestUnwind(unwindSuspend, nil, wakeAt, reason)
	rs.stopNow()
}

// requestUnwind asks the workflow goroutine to stop for reason k. The first reason
// wins, except that a lost lease overrides everything (nothing may be written).
func (rs *RunState) requestUnwind(k unwindKind, err error, wakeAt *time.Time, reason string) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	switch {
	case rs.unwind == unwindNone:
	case k == unwindAbandon && rs.unwind != unwindAbandon:
	case k == unwindFail && (rs.unwind == unwindSuspend || rs.unwind == unwindHandBack):
		// What is queued is saved with the run's failure instead.
	case k == unwindSuspend && rs.unwind == unwindSuspend:
		// Wake for the earliest need of every suspended op.
		if wakeAt != nil && (rs.wakeAt == nil || wakeAt.Before(*rs.wakeAt)) {
			rs.wakeAt, rs.waitReason = wakeAt, reason
		}
		return
	default:
		return
	}
	if rs.unwind == unwindNone {
		close(rs.unwinding)
	}
	rs.unwind, rs.unwindErr, rs.wakeAt, rs.waitReason = k, err, wakeAt, reason
}

// failRun asks for the run to fail with err once the workflow goroutine and
// its async steps have stopped (ExecuteOutcome), saving what is queued.
func (rs *RunState) failRun(err error) { rs.requestUnwind(unwindFail, err, nil, "") }

// failure returns the error the run must fail with (failRun), nil when none.
func (rs *RunState) failure() error {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.unwind != unwindFail {
		return nil
	}
	return rs.unwindErr
}

// stopNow ends the workflow goroutine after in-flight async steps settle. It runs
// deferred functions of the workflow but cannot be recovered by it.
func (rs *RunState) stopNow() {
	rs.inflight.Wait()
	runtime.Goexit()
}

// block stops the run as blocked on a non-determinism error.
func (rs *RunState) block(err error) {
	rs.requestUnwind(unwindBlocked, err, nil, "")
	rs.stopNow()
}

// checkUnwind stops the workflow goroutine if an unwind was requested or the run's
// context ended (lease lost, worker shutting down).
func (rs *RunState) checkUnwind() {
	if err := rs.ctx.Err(); err != nil {
		rs.requestUnwind(rs.ctxUnwindKind(), nil, nil, "")
	}
	select {
	case <-rs.unwinding:
		rs.stopNow()
	default:
	}
}

func (rs *RunState) ctxUnwindKind() unwindKind {
	if errors.Is(context.Cause(rs.ctx), store.ErrLeaseLost) {
		return unwindAbandon
	}
	return unwindHandBack
}

// interrupted reports why new ops may not start: cancellation (unless detached) or
// the run's deadline. It returns nil when they may.
func (rs *RunState) interrupted(detached bool) error {
	if d := rs.run.Deadline; d != nil && !rs.now().Before(*d) {
		rs.mu.Lock()
		rs.deadlineHit = true
		rs.mu.Unlock()
		return ErrDeadlineExceeded
	}
	if detached {
		return nil
	}
	select {
	case <-rs.ctl.CancelRequested():
		rs.mu.Lock()
		rs.cancelSeen = true
		rs.mu.Unlock()
		return ErrCancelled
	default:
		return nil
	}
}

// Encode encodes a value with the run's codec, enforcing the payload limit.
func (rs *RunState) Encode(v any) ([]byte, error) {
	b, err := rs.codec.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding value: %w", err)
	}
	if len(b) > rs.limit {
		return nil, fmt.Errorf("%w: %d bytes (%slimit %d)", ErrPayloadTooLarge, len(b), rs.limitOf, rs.limit)
	}
	return b, nil
}

// recordInternal records the result of an engine op (now, uuid, random, patch), which
// is always JSON whatever the user's codec.
func (rs *RunState) recordInternal(pos int, kind store.OpKind, name string, v any) {
	b, _ := json.Marshal(v) // values of these ops always encode
	at := rs.now()
	rs.record(&store.Op{Position: pos, Kind: kind, Name: name, Done: true, Result: b, Attempts: 1, StartedAt: at, FinishedAt: &at}, nil)
}

// payloadLimit is the payload limit of a claimed run: the engine's
// (Config.MaxPayloadBytes), or its queue's (store.ClaimedRun.PayloadLimit)
// when lower, and the words that say which for an error ("queue \"q\" ", or
// "").
func (e *Engine) payloadLimit(cr *store.ClaimedRun) (int, string) {
	if l := cr.PayloadLimit; l > 0 && l < e.cfg.MaxPayloadBytes {
		return l, fmt.Sprintf("queue %q ", cr.Run.Queue)
	}
	return e.cfg.MaxPayloadBytes, ""
}
