package engine

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// TxStep runs fn as a step whose store writes commit in one transaction with the
// step's checkpoint, and returns its op, done. fn's result is encoded with the
// run's codec. A store without transactions fails the step with ErrTxNotSupported.
func (rs *RunState) TxStep(name string, fn func(ctx context.Context, tx any) (any, error), o StepOptions, detached bool) *store.Op {
	rs.checkUnwind()
	pos, rec := rs.next(store.OpStep, name)
	if rec != nil && rec.Done {
		return rec
	}
	sc := rs.newStepCall(name, pos, rec, nil, o, detached)
	txc, ok := rs.e.cfg.Store.(store.TxCheckpointer)
	if !ok {
		return sc.finish(nil, NonRetryable(ErrTxNotSupported))
	}
	sc.txc = txc
	sc.txFn = func(ctx context.Context, tx any) ([]byte, error) {
		v, err := fn(ctx, tx)
		if err != nil {
			return nil, err
		}
		return rs.Encode(v)
	}
	op, ok := sc.execute()
	if !ok {
		rs.checkUnwind()
	}
	return op
}

// attemptTx runs one attempt in a store transaction. err is fn's failure (the
// transaction rolled back); storeErr any other failure, after which whether the
// transaction committed may be unknown, so the run must stop.
func (sc *stepCall) attemptTx() (op *store.Op, err, storeErr error) {
	rs := sc.rs
	ctx, stop := sc.attemptContext()
	defer stop.release()
	rs.ckMu.Lock() // serialised with the run's other checkpoints, like checkpoint
	defer rs.ckMu.Unlock()
	p := &store.CheckpointParams{Status: store.StatusRunning, Lease: rs.lease}
	q := rs.take() // queued by async steps since the flush
	rs.addStarted(&q, p.Status)
	q.apply(p)
	m := len(p.Stream)
	n := len(p.Ops)
	res, txErr := sc.txc.CheckpointTx(ctx, p, func(ctx context.Context, tx any) error {
		v, ferr := sc.call(ctx, func(ctx context.Context) (any, error) { return sc.txFn(ctx, tx) })
		if ferr != nil {
			err = ferr
			return ferr
		}
		b, _ := v.([]byte)
		at := rs.now()
		op = sc.op()
		op.Done, op.Result, op.FinishedAt = true, b, &at
		sc.setAttemptStart(op)
		p.Ops = append(p.Ops[:n:n], op)
		p.Stream = append(p.Stream[:m:m], sc.completedEvent(at))
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
