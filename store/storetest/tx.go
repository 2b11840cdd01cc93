package storetest

import (
	"context"
	"errors"
	"testing"

	"github.com/trellis-dev/trellis/store"
)

// The optional transactional capabilities (store/tx.go). A store that implements
// them is tested through them; the cases skip otherwise. The suite cannot open a
// transaction on a driver's database itself, so RunCreateTx is tested inside the
// transaction CheckpointTx hands to its fn: the store's own, of the right type.
var txCases = []testCase{
	{"CheckpointTxCommits", txCheckpointCommits},
	{"CheckpointTxFnErrorWritesNothing", txCheckpointFnError},
	{"CheckpointTxStaleLeaseWritesNothing", txCheckpointStale},
	{"RunCreateTxCommitsWithTheTransaction", txCreateCommits},
	{"RunCreateTxRollsBackWithTheTransaction", txCreateRollsBack},
	{"RunCreateTxInvalid", txCreateInvalid},
}

func (e *env) txCheckpointer() store.TxCheckpointer {
	e.t.Helper()
	tc, ok := e.st.(store.TxCheckpointer)
	if !ok {
		e.t.Skip("the store does not implement store.TxCheckpointer")
	}
	return tc
}

func (e *env) txStarter() (store.TxStarter, store.TxCheckpointer) {
	e.t.Helper()
	ts, ok := e.st.(store.TxStarter)
	if !ok {
		e.t.Skip("the store does not implement store.TxStarter")
	}
	return ts, e.txCheckpointer()
}

var errTxFn = errors.New("the step's own write failed")

func txCheckpointCommits(t *testing.T, e *env) {
	tc := e.txCheckpointer()
	cr := e.start()
	called := false
	p := &store.CheckpointParams{Lease: cr.Lease(), Status: store.StatusRunning}
	_, err := tc.CheckpointTx(e.ctx, p, func(_ context.Context, tx any) error {
		called = tx != nil
		p.Ops = append(p.Ops, e.doneStep(0, "tx-step", `"done"`)) // fn completes p
		return nil
	})
	if err != nil || !called {
		t.Fatalf("CheckpointTx: %v (fn called with a transaction: %v)", err, called)
	}
	if ops := e.history(cr.Run.ID); len(ops) != 1 || ops[0].Name != "tx-step" || string(ops[0].Result) != `"done"` {
		t.Fatalf("history after CheckpointTx = %v, want the op fn added", opNames(ops))
	}
	e.wantStatus(cr.Run.ID, store.StatusRunning)
}

func txCheckpointFnError(t *testing.T, e *env) {
	tc := e.txCheckpointer()
	cr := e.start()
	p := &store.CheckpointParams{Lease: cr.Lease(), Status: store.StatusSucceeded, Output: []byte(`1`),
		Ops: []*store.Op{e.doneStep(0, "s", `1`)}, KV: []store.KVWrite{{Key: "k", Value: []byte(`1`)}}}
	_, err := tc.CheckpointTx(e.ctx, p, func(context.Context, any) error { return errTxFn })
	wantErr(t, "CheckpointTx whose fn fails", err, errTxFn)
	e.wantUntouched(cr.Run.ID)
	e.wantStatus(cr.Run.ID, store.StatusRunning)
	e.finish(cr) // the lease still holds
}

func txCheckpointStale(t *testing.T, e *env) {
	tc := e.txCheckpointer()
	cr := e.start()
	stale := cr.Lease()
	stale.Token++
	ts, hasStarter := e.st.(store.TxStarter)
	child := e.params()
	p := &store.CheckpointParams{Lease: stale, Status: store.StatusRunning, Ops: []*store.Op{e.doneStep(0, "s", `1`)}}
	_, err := tc.CheckpointTx(e.ctx, p, func(ctx context.Context, tx any) error {
		if !hasStarter {
			return nil
		}
		_, err := ts.RunCreateTx(ctx, tx, child)
		return err
	})
	wantErr(t, "CheckpointTx with a stale lease", err, store.ErrLeaseLost)
	e.wantUntouched(cr.Run.ID)
	if hasStarter {
		_, err := e.st.RunGet(e.ctx, &store.RunGetParams{Namespace: ns, Ref: child.ID})
		wantErr(t, "RunGet of a run created by fn under a stale lease", err, store.ErrRunNotFound)
	}
}

// createInTx creates a run with RunCreateTx inside a CheckpointTx of cr, whose fn
// then returns fnErr. It returns CheckpointTx's error.
func (e *env) createInTx(cr *store.ClaimedRun, p *store.RunCreateParams, fnErr error) error {
	e.t.Helper()
	ts, tc := e.txStarter()
	ck := &store.CheckpointParams{Lease: cr.Lease(), Status: store.StatusRunning}
	_, err := tc.CheckpointTx(e.ctx, ck, func(ctx context.Context, tx any) error {
		res, err := ts.RunCreateTx(ctx, tx, p)
		if err != nil {
			return err
		}
		if !res.Created || res.Run.ID != p.ID || res.Run.Status != store.StatusPending {
			e.t.Errorf("RunCreateTx = %+v, want the new run created pending", res)
		}
		return fnErr
	})
	return err
}

func txCreateCommits(t *testing.T, e *env) {
	cr := e.start()
	p := e.params()
	if err := e.createInTx(cr, p, nil); err != nil {
		t.Fatalf("CheckpointTx with RunCreateTx: %v", err)
	}
	e.wantStatus(p.ID, store.StatusPending)
	e.claimOne(p.ID)
}

func txCreateRollsBack(t *testing.T, e *env) {
	cr := e.start()
	p := e.params()
	err := e.createInTx(cr, p, errTxFn)
	wantErr(t, "CheckpointTx whose fn fails after RunCreateTx", err, errTxFn)
	_, err = e.st.RunGet(e.ctx, &store.RunGetParams{Namespace: ns, Ref: p.ID})
	wantErr(t, "RunGet of a run created in a rolled back transaction", err, store.ErrRunNotFound)
	e.wantNoClaim()
}

func txCreateInvalid(t *testing.T, e *env) {
	ts, _ := e.txStarter()
	_, err := ts.RunCreateTx(e.ctx, "not a transaction", e.params())
	wantErr(t, "RunCreateTx with a foreign tx", err, store.ErrInvalidParams)
	cr := e.start()
	p := e.params()
	p.Claim = &store.CreateClaim{Worker: worker, LeaseDuration: leaseDur}
	err = e.createInTx(cr, p, nil)
	wantErr(t, "RunCreateTx with a Claim", err, store.ErrInvalidParams)
	_, err = e.st.RunGet(e.ctx, &store.RunGetParams{Namespace: ns, Ref: p.ID})
	wantErr(t, "RunGet of a rejected RunCreateTx", err, store.ErrRunNotFound)
}
