package trellis

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/trellis-dev/trellis/store"
)

// ErrTxNotSupported: the client's store cannot run a transactional start or step
// (only the SQL stores can: SQLite and Postgres).
var ErrTxNotSupported = errors.New("the store does not support transactions of the caller")

// TxStep runs fn as a step whose writes to the store's database commit in one
// transaction with the step's checkpoint: once the step is recorded its writes are
// committed, and a step that did not complete (failed, timed out, lost its lease,
// crashed) committed none of them. Database effects are thus applied exactly once.
//
// tx is a pgx.Tx on Postgres and a *sql.Tx on SQLite; on Postgres, unqualified
// table names resolve in the Trellis schema, then in public. On SQLite fn runs on
// the store's single write connection and other writes wait for it: keep it short.
// fn must not keep tx or use it after returning.
//
// Retries follow opts as for Step. Unlike Step, fn runs to completion even past
// its timeout (the transaction needs it to return), so it should honour ctx. If
// the commit's outcome is unknown (the connection broke), the run stops here and
// is replayed from what the store holds. A store without transactions (the remote
// client) fails the step with ErrTxNotSupported. History records a TxStep as a
// step: Step and TxStep may replace each other under running workflows.
func TxStep[T any](wc *Context, name string, fn func(ctx context.Context, tx any) (T, error), opts ...StepOptions) (T, error) {
	rs := wc.rs
	rs.checkUnwind()
	pos, rec := rs.next(store.OpStep, name)
	if rec != nil && rec.Done {
		return decodeStep[T](rs, rec)
	}
	none := func(context.Context) (T, error) { var v T; return v, nil }
	sc := newStepCall(wc, name, pos, rec, none, opts)
	op, ok := sc.executeTx(func(ctx context.Context, tx any) ([]byte, error) {
		v, err := fn(ctx, tx)
		if err != nil {
			return nil, err
		}
		return rs.encode(v)
	})
	if !ok {
		rs.checkUnwind()
	}
	return decodeStep[T](rs, op)
}

// executeTx is execute for a transactional step: a successful attempt is recorded by
// the transaction itself, not queued for the next checkpoint.
func (sc *stepCall) executeTx(fn func(ctx context.Context, tx any) ([]byte, error)) (*store.Op, bool) {
	rs := sc.wc.rs
	txc, ok := rs.c.store.(store.TxCheckpointer)
	if !ok {
		return sc.finish(nil, NonRetryable(ErrTxNotSupported)), true
	}
	for {
		if rs.ctx.Err() != nil {
			rs.requestUnwind(rs.ctxUnwindKind(), nil, nil, "")
			return nil, false
		}
		if err := rs.interrupted(sc.wc.detached); err != nil {
			return sc.finish(nil, err), true
		}
		// A full flush, derivable waits included: the transactional checkpoint
		// carries only the step's op and what async steps queue meanwhile.
		if _, err := rs.checkpoint(&store.CheckpointParams{Status: store.StatusRunning}, false); err != nil {
			rs.requestUnwind(flushFailure(err), err, nil, "")
			return nil, false
		}
		sc.attempt++
		t0 := rs.now()
		op, err, storeErr := sc.attemptTx(txc, fn)
		if storeErr != nil {
			rs.requestUnwind(unwindAbandon, storeErr, nil, "")
			return nil, false
		}
		if rs.ctx.Err() != nil {
			rs.requestUnwind(rs.ctxUnwindKind(), nil, nil, "")
			return nil, false
		}
		if err == nil {
			return op, true
		}
		att := store.Attempt{Position: sc.pos, Attempt: sc.attempt, Error: *errorInfo(err), StartedAt: t0, FinishedAt: rs.now()}
		rs.recordAttempt(sc.op(), att)
		if !sc.policy.retryable(err, sc.attempt) {
			return sc.finish(nil, err), true
		}
		if !sc.backoff() {
			return nil, false
		}
	}
}

// attemptTx runs one attempt in a store transaction. err is fn's failure (the
// transaction rolled back); storeErr any other failure, after which whether the
// transaction committed may be unknown, so the run must stop.
func (sc *stepCall) attemptTx(txc store.TxCheckpointer, fn func(ctx context.Context, tx any) ([]byte, error)) (op *store.Op, err, storeErr error) {
	rs := sc.wc.rs
	ctx, cancel := sc.wc.stepContext(sc.timeout)
	defer cancel()
	ctx = context.WithValue(ctx, stepInfoKey{}, StepAttempt{
		RunID: rs.run.ID, Step: sc.name, Position: sc.pos, Attempt: sc.attempt,
		IdempotencyKey: rs.run.ID + "/" + strconv.Itoa(sc.pos),
	})
	rs.ckMu.Lock() // serialised with the run's other checkpoints, like checkpoint
	defer rs.ckMu.Unlock()
	p := &store.CheckpointParams{Status: store.StatusRunning, Lease: rs.lease}
	rs.mu.Lock()
	p.Ops, p.Attempts, p.KV = rs.pendingOps, rs.pendingAtt, rs.pendingKV // queued by async steps since the flush
	w := rs.pendingWait
	rs.pendingOps, rs.pendingAtt, rs.pendingKV, rs.pendingWait = nil, nil, nil, waitWrites{}
	rs.mu.Unlock()
	w.apply(p)
	queued := len(p.Ops)
	res, txErr := txc.CheckpointTx(ctx, p, func(ctx context.Context, tx any) error {
		v, ferr := callSafely(ctx, func(ctx context.Context) (any, error) { return fn(ctx, tx) })
		if ferr != nil {
			err = ferr
			return ferr
		}
		b, _ := v.([]byte)
		at := rs.now()
		op = sc.op()
		op.Done, op.Result, op.FinishedAt = true, b, &at
		p.Ops = append(p.Ops[:queued:queued], op)
		return nil
	})
	if txErr == nil {
		if res.CancelRequested {
			rs.ctl.RequestCancel()
		}
		return op, nil, nil
	}
	rs.requeue(p.Ops[:queued], p.Attempts, p.KV, w)
	if err != nil {
		if ctx.Err() != nil {
			err = sc.contextError(ctx, err)
		}
		return nil, err, nil
	}
	return nil, nil, fmt.Errorf("checkpointing run %s in a transaction: %w", rs.run.ID, txErr)
}

// requeue puts back writes taken for a checkpoint that did not commit, before any
// queued since.
func (rs *runState) requeue(ops []*store.Op, atts []store.Attempt, kv []store.KVWrite, w waitWrites) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.pendingOps = append(ops[:len(ops):len(ops)], rs.pendingOps...)
	rs.pendingAtt = append(atts[:len(atts):len(atts)], rs.pendingAtt...)
	rs.pendingKV = append(kv[:len(kv):len(kv)], rs.pendingKV...)
	q := &rs.pendingWait
	q.consume = append(w.consume[:len(w.consume):len(w.consume)], q.consume...)
	q.noEvents = append(w.noEvents[:len(w.noEvents):len(w.noEvents)], q.noEvents...)
	q.children = append(w.children[:len(w.children):len(w.children)], q.children...)
	q.approvals = append(w.approvals[:len(w.approvals):len(w.approvals)], q.approvals...)
	q.expire = append(w.expire[:len(w.expire):len(w.expire)], q.expire...)
}
