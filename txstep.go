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
	txc, ok := rs.c.store.(store.TxCheckpointer)
	if !ok {
		return decodeStep[T](rs, sc.finish(nil, NonRetryable(ErrTxNotSupported)))
	}
	sc.txc = txc
	sc.txFn = func(ctx context.Context, tx any) ([]byte, error) {
		v, err := fn(ctx, tx)
		if err != nil {
			return nil, err
		}
		return rs.encode(v)
	}
	op, ok := sc.execute()
	if !ok {
		rs.checkUnwind()
	}
	return decodeStep[T](rs, op)
}

// attemptTx runs one attempt in a store transaction. err is fn's failure (the
// transaction rolled back); storeErr any other failure, after which whether the
// transaction committed may be unknown, so the run must stop.
func (sc *stepCall) attemptTx() (op *store.Op, err, storeErr error) {
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
	q := rs.take() // queued by async steps since the flush
	q.apply(p)
	n := len(p.Ops)
	res, txErr := sc.txc.CheckpointTx(ctx, p, func(ctx context.Context, tx any) error {
		v, ferr := callSafely(ctx, func(ctx context.Context) (any, error) { return sc.txFn(ctx, tx) })
		if ferr != nil {
			err = ferr
			return ferr
		}
		b, _ := v.([]byte)
		at := rs.now()
		op = sc.op()
		op.Done, op.Result, op.FinishedAt = true, b, &at
		p.Ops = append(p.Ops[:n:n], op)
		return nil
	})
	if txErr == nil {
		if res.CancelRequested {
			rs.ctl.RequestCancel()
		}
		return op, nil, nil
	}
	rs.requeue(q)
	if err != nil {
		if ctx.Err() != nil {
			err = sc.contextError(ctx, err)
		}
		return nil, err, nil
	}
	return nil, nil, fmt.Errorf("checkpointing run %s in a transaction: %w", rs.run.ID, txErr)
}
