package storesqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

var (
	_ store.TxStarter      = (*Store)(nil)
	_ store.TxCheckpointer = (*Store)(nil)
)

// runCreateTxRaw implements (under RunCreateTx, blobsopen.go) store.TxStarter: tx is a *sql.Tx on the store's database
// file. The store cannot see when tx commits, so no worker is woken: the run is
// claimed at a worker's next poll (Worker.PollInterval).
func (s *Store) runCreateTxRaw(ctx context.Context, tx any, p *store.RunCreateParams) (*store.RunCreateResult, error) {
	stx, ok := tx.(*sql.Tx)
	if !ok {
		return nil, fmt.Errorf("creating run in a transaction: %w: tx is %T, want *sql.Tx", store.ErrInvalidParams, tx)
	}
	if p.Claim != nil {
		return nil, fmt.Errorf("creating run in a transaction: %w: Claim is not allowed", store.ErrInvalidParams)
	}
	if p.Idempotency != nil {
		return nil, fmt.Errorf("creating run in a transaction: %w: Idempotency is not allowed", store.ErrInvalidParams)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("creating run in a transaction: %w", err)
	}
	if err := s.reserve.Load().admit(); err != nil {
		return nil, fmt.Errorf("creating run in a transaction: %w", err)
	}
	res, err := runCreate(&wtx{w: s.w, now: s.now().UTC(), ext: stx, ctx: ctx}, p)
	if err != nil {
		return nil, fmt.Errorf("creating run in a transaction: %w", err)
	}
	return res, nil
}

// CheckpointTx implements store.TxCheckpointer (its big payloads moved apart first): fn gets a *sql.Tx on the write
// connection, so it runs in the writer's goroutine with a transaction of its own,
// and other writes wait for it: keep fn short.
func (s *Store) CheckpointTx(ctx context.Context, p *store.CheckpointParams, fn func(ctx context.Context, tx any) error) (*store.CheckpointResult, error) {
	p, err := sqlstore.CheckpointPayloads(&s.methods, ctx, p)
	if err != nil {
		return nil, err
	}
	if !p.Status.Valid() {
		return nil, fmt.Errorf("checkpointing: %w: Status: unknown status %q", store.ErrInvalidParams, p.Status)
	}
	var (
		res   *store.CheckpointResult
		fnErr error
	)
	r := &request{ctx: ctx, done: make(chan error, 1), alone: func(w *writer) error {
		var err error
		res, fnErr, err = checkpointTx(ctx, w, p, fn)
		return err
	}}
	err = s.submit(ctx, r)
	switch {
	case fnErr != nil:
		return nil, fnErr
	case err != nil:
		return nil, fmt.Errorf("checkpointing: %w", err)
	}
	return res, nil
}

// checkpointTx runs fn and then the checkpoint in one transaction on the write
// connection. fnErr is fn's failure (or panic); err any other.
func checkpointTx(ctx context.Context, w *writer, p *store.CheckpointParams, fn func(ctx context.Context, tx any) error) (res *store.CheckpointResult, fnErr, err error) {
	stx, err := w.conn.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("beginning transaction: %w", err)
	}
	defer func() { _ = stx.Rollback() }() // after Commit, a no-op
	if fnErr = callTxFn(ctx, fn, stx); fnErr != nil {
		return nil, fnErr, nil
	}
	errText, err := errJSON(p.Error)
	if err != nil {
		return nil, nil, err
	}
	// The checkpoint's statements run in stx, the write connection's transaction
	// (the writer's own driver-level statements are for its batches).
	tx := &wtx{w: w, now: w.s.now().UTC(), ext: stx, ctx: ctx}
	if res, err = checkpoint(tx, p, errText); err != nil {
		return nil, nil, err
	}
	if err := stx.Commit(); err != nil {
		return nil, nil, fmt.Errorf("committing: %w", err)
	}
	w.s.hub.Publish(tx.topics...)
	return res, nil, nil
}

// callTxFn calls fn, turning a panic into an error: fn runs on the writer's
// goroutine, which must survive it.
func callTxFn(ctx context.Context, fn func(ctx context.Context, tx any) error, tx *sql.Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic in transactional step: %v", r)
		}
	}()
	return fn(ctx, tx)
}
