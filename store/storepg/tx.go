package storepg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

var (
	_ store.TxStarter      = (*Store)(nil)
	_ store.TxCheckpointer = (*Store)(nil)
)

// txSender is the sender of notifications sent inside a caller's transaction. It
// is no store's ID, so every store's listener, this one's included, publishes
// them: the store cannot tell when the caller commits, the listener can.
const txSender = "tx"

// runCreateTxRaw implements (under RunCreateTx, blobsopen.go) store.TxStarter: tx is a pgx.Tx on the store's database.
// The create statement and a NOTIFY run inside tx, so workers are woken when (and
// only if) it commits.
func (s *Store) runCreateTxRaw(ctx context.Context, tx any, p *store.RunCreateParams) (*store.RunCreateResult, error) {
	ptx, ok := tx.(pgx.Tx)
	if !ok {
		return nil, fmt.Errorf("creating run in a transaction: %w: tx is %T, want pgx.Tx", store.ErrInvalidParams, tx)
	}
	if p.Claim != nil {
		return nil, fmt.Errorf("creating run in a transaction: %w: Claim is not allowed", store.ErrInvalidParams)
	}
	if p.Idempotency != nil {
		return nil, fmt.Errorf("creating run in a transaction: %w: Idempotency is not allowed", store.ErrInvalidParams)
	}
	st, cr, err := s.runCreateStmt(p)
	if err != nil {
		return nil, fmt.Errorf("creating run in a transaction: %w", err)
	}
	res := cr.res
	if err := runInTx(ctx, ptx, s.schemaSQL(st.sql), st); err != nil {
		return nil, fmt.Errorf("creating run in a transaction: %w", err)
	}
	if *res == nil {
		return nil, fmt.Errorf("creating run in a transaction: %w", store.RunExistsError(p.ID, p.WorkflowID, p.Reuse))
	}
	if (*res).Created {
		payload := txSender + "\n" + store.TopicReady + "\n" + store.RunTopic(p.Namespace, p.ID)
		if _, err := ptx.Exec(ctx, `SELECT pg_notify($1, $2)`, s.channel, payload); err != nil {
			return nil, fmt.Errorf("creating run in a transaction: notifying: %w", err)
		}
	}
	return *res, nil
}

// stepTxOptions begin a transactional step's transaction. The user's code may
// pause inside it (a call to another service, say): the store's
// idle-in-transaction timeout (idleInTxTimeout) is for its own transactions
// only, so this one turns it off, in the same round trip as its BEGIN.
var stepTxOptions = pgx.TxOptions{BeginQuery: `BEGIN; SET LOCAL idle_in_transaction_session_timeout = 0`}

// CheckpointTx implements store.TxCheckpointer (its big payloads moved apart first): fn gets a pgx.Tx on a connection
// of the store's pool; the fenced checkpoint follows fn's writes in that
// transaction.
func (s *Store) CheckpointTx(ctx context.Context, p *store.CheckpointParams, fn func(ctx context.Context, tx any) error) (*store.CheckpointResult, error) {
	p, err := sqlstore.CheckpointPayloads(&s.methods, ctx, p)
	if err != nil {
		return nil, err
	}
	if _, err := newCkReq(s.now(), p); err != nil {
		return nil, fmt.Errorf("checkpointing: %w", err)
	}
	tx, err := s.pool.BeginTx(ctx, stepTxOptions)
	if err != nil {
		return nil, fmt.Errorf("checkpointing: beginning transaction: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // after Commit, a no-op
	if err := callTxFn(ctx, fn, tx); err != nil {
		return nil, err
	}
	ck, err := newCkReq(s.now(), p) // fn may have completed p
	if err != nil {
		return nil, fmt.Errorf("checkpointing: %w", err)
	}
	if err := runInTx(ctx, tx, "", checkpointStmt(ck)); err != nil {
		return nil, fmt.Errorf("checkpointing: %w", err)
	}
	l := p.Lease
	if ck.res == nil {
		return nil, fmt.Errorf("checkpointing: %w: run %q token %d", store.ErrLeaseLost, l.RunID, l.Token)
	}
	topics := checkpointTopics(p)
	if payloads := s.payloads([]*request{{topics: topics}}); len(payloads) > 0 {
		if _, err := tx.Exec(ctx, sqlNotify, s.channel, payloads); err != nil {
			return nil, fmt.Errorf("checkpointing: notifying: %w", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("checkpointing: committing: %w", err)
	}
	if len(topics) > 0 {
		s.hub.Publish(topics...)
	}
	return ck.res, nil
}

// runInTx runs st in tx and reads its rows. sql, when not empty, replaces st.sql.
func runInTx(ctx context.Context, tx pgx.Tx, sql string, st stmt) error {
	if sql == "" {
		sql = st.sql
	}
	rows, err := tx.Query(ctx, sql, st.args...)
	if err != nil {
		return err
	}
	var readErr error
	if st.rows != nil {
		readErr = st.rows(rows)
	}
	rows.Close()
	return errors.Join(rows.Err(), readErr)
}

// callTxFn calls fn, turning a panic into an error.
func callTxFn(ctx context.Context, fn func(ctx context.Context, tx any) error, tx pgx.Tx) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic in transactional step: %v", r)
		}
	}()
	return fn(ctx, tx)
}
