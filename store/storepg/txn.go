package storepg

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-dev/trellis/store"
)

// Operations whose next statement depends on the previous one's result — deciding
// an approval, cancelling a run and its children, a checkpoint that uses events,
// children or approvals, a batch of children's final checkpoints — run in a
// transaction of their own on the pool, outside the group-commit writer, whose
// batches are sent in one round trip and cannot branch. They are rarer than plain
// checkpoints and claims, and each one is plain Go over plain statements.
//
// Concurrency (READ COMMITTED): every such transaction first locks the row of the run
// it changes (FOR NO KEY UPDATE, the lock an UPDATE takes), so it is serialised with
// the fast path's fenced updates and with other senders; a child group's counters
// are serialised by the group's row. Rows of a family of runs are locked parent,
// then group, then children (lockFamilies). Should two transactions still lock rows
// in opposite orders, Postgres aborts one with a deadlock error and it is run again.

// wtx is one transaction of the waiting path.
type wtx struct {
	pgx.Tx
	ctx    context.Context
	now    time.Time // the clock, read once per attempt, in microseconds
	topics []string  // notified when the transaction commits
}

// publish queues topics to signal (NOTIFY and local subscribers) after commit.
func (tx *wtx) publish(topics ...string) { tx.topics = append(tx.topics, topics...) }

// exec runs a statement and returns its command tag.
func (tx *wtx) exec(sql string, args ...any) (pgconn.CommandTag, error) {
	return tx.Exec(tx.ctx, sql, args...)
}

// queryRow runs a statement returning at most one row.
func (tx *wtx) queryRow(sql string, args ...any) pgx.Row { return tx.QueryRow(tx.ctx, sql, args...) }

// query runs a statement returning rows.
func (tx *wtx) query(sql string, args ...any) (pgx.Rows, error) {
	return tx.Query(tx.ctx, sql, args...)
}

// inTx runs fn in a transaction and commits it, notifying the topics fn published in
// the same transaction (so the notification fires on commit) and then locally. A
// deadlock or serialization failure, or a connection lost before anything was sent,
// runs fn again from the start: fn must keep no state across attempts but what it
// returns through variables it overwrites.
func (s *Store) inTx(ctx context.Context, fn func(tx *wtx) error) error {
	return s.retryTx(ctx, func(ctx context.Context) ([]string, error) { return s.tryTx(ctx, fn) })
}

// retryTx makes attempts of a transaction with try, as inTx does, until one
// commits (then it publishes the topics the attempt returned), fails for good, or
// ctx ends.
func (s *Store) retryTx(ctx context.Context, try func(ctx context.Context) ([]string, error)) error {
	if s.closed() {
		return store.ErrClosed
	}
	var (
		retries   int
		reconnect backoff
	)
	for {
		topics, err := try(ctx)
		switch {
		case err == nil:
			if len(topics) > 0 {
				s.hub.Publish(topics...)
				s.n.add(topics)
			}
			return nil
		case ctx.Err() != nil:
			return err
		case isRetryable(err) && retries < maxDeadlockRetries:
			retries++
		case connRetryable(err) && reconnect.wait(s.closedCh, ctx.Done()):
		default:
			return s.readErr(err)
		}
	}
}

// tryTx is one attempt of inTx; it returns the topics to publish locally.
func (s *Store) tryTx(ctx context.Context, fn func(tx *wtx) error) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
	defer cancel()
	pt, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = pt.Rollback(context.Background()) }() // a no-op after Commit
	tx := &wtx{Tx: pt, ctx: ctx, now: s.now().Truncate(time.Microsecond)}
	if err := fn(tx); err != nil {
		return nil, err
	}
	// Other processes are notified after the commit (see notifier.go).
	if err := pt.Commit(ctx); err != nil {
		return nil, err
	}
	return tx.topics, nil
}

// lockRun locks the row of the run Ref names (a run ID or the latest run of a
// workflow ID) and returns it with its place in a parent's group. ErrRunNotFound
// when none matches. A child's parent and group are locked first (lockFamilies):
// a child that ends as it is cancelled is counted in its group, which may fail the
// group and cancel its siblings.
func lockRun(tx *wtx, namespace, ref string) (*runRow, error) {
	if err := lockFamilies(tx, sqlLockFamilyOfRef, namespace, ref); err != nil {
		return nil, err
	}
	r, err := scanRunRow(tx.queryRow(sqlLockRunByRef, namespace, ref))
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, store.RunNotFound(namespace, ref)
	}
	return r, err
}

// runRow is a run with the columns that place it in a parent's group.
type runRow struct {
	*store.Run
	parentSeq *int64
	position  *int32
}

const runRowCols = runCols + `, parent_seq, parent_position`

var sqlLockRunByRef = `SELECT ` + runRowCols + ` FROM runs WHERE sequence = ` + refSeq + ` FOR NO KEY UPDATE`

func scanRunRow(sc scanner) (*runRow, error) {
	r := &runRow{}
	var err error
	r.Run, _, err = scanRun(suffixedInto{sc, []any{&r.parentSeq, &r.position}})
	return r, err
}
