package storepg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-dev/trellis/store"
)

// The waiting path of Checkpoint. A checkpoint that uses events, children or
// approvals needs statements that depend on each other's results (group
// accounting, releasing held children, waking a parent), so it runs in a
// transaction of its own (see txn.go) instead of the merged statement of the
// writer's batches, which stays as fast as before for every other checkpoint. The
// fast path's final update matches no row of a child (parent_seq IS NOT NULL), so a
// child's plain final checkpoint goes to the ender after it (childend.go), which
// ends the children waiting at the same time in one transaction: no query, no
// memory of which runs are children, and plain runs pay nothing.
//
// Round trips: the fenced update (which is the lock and the lease check), then every
// other write of the checkpoint pipelined in one batch, then, for a child that ended,
// its group's accounting.

// ckWaitStatus is a fenced state change of the waiting path: set, then the
// guard of the checkpoint's key (ckGuard) on parameters $n and $n+1, then the
// fence ($1 namespace, $2 run ID, $3 token); $4 is now.
func ckWaitStatus(set string, n int) string {
	guardSet, guardWhere := ckGuard(fmt.Sprintf("$%d", n), fmt.Sprintf("$%d", n+1))
	return `UPDATE runs SET ` + set + `, ` + guardSet + `
	WHERE sequence = ` + seqOf("$1", "$2") + ` AND status = 'running' AND lease_token = $3` + guardWhere + `
	RETURNING sequence, cancel_requested, parent_seq, parent_position`
}

// Fenced state changes of the waiting path, per target status.
var (
	// sqlWCkRunning only locks the row of an unguarded checkpoint; a guarded
	// one keeps its key (sqlWCkRunningGuarded).
	sqlWCkRunning = `SELECT sequence, cancel_requested, parent_seq, parent_position FROM runs
	WHERE sequence = ` + seqOf("$1", "$2") + ` AND status = 'running' AND lease_token = $3
	FOR NO KEY UPDATE`
	sqlWCkRunningGuarded = ckWaitStatus(`updated_at = $4`, 5)
	// sqlWCkWaiting hands a run whose cancellation was requested back instead
	// (pending, due now), as the fast path does.
	sqlWCkWaiting = ckWaitStatus(`status = CASE WHEN cancel_requested THEN 'pending' ELSE 'waiting' END,
	available_at = CASE WHEN cancel_requested THEN $4::timestamptz ELSE $5::timestamptz END,
	wait_reason = CASE WHEN cancel_requested THEN '' ELSE $6::text END,
	wait_events = CASE WHEN cancel_requested THEN NULL ELSE $7::text[] END,
	lease_owner = '', lease_expires_at = NULL, updated_at = $4`, 8)
	sqlWCkBlocked = ckWaitStatus(`status = 'blocked', error = $5, wait_reason = $6,
	lease_owner = '', lease_expires_at = NULL, updated_at = $4`, 7)
	sqlWCkPending = ckWaitStatus(`status = 'pending', available_at = $4, wait_reason = '',
	lease_owner = '', lease_expires_at = NULL, updated_at = $4`, 5)
	sqlWCkFinished = ckWaitStatus(`status = $5, output = $6, error = $7, wait_reason = '',
	lease_owner = '', lease_expires_at = NULL, finished_at = $4, updated_at = $4`, 8)
)

// History writes of the waiting path; $1 is the run's sequence.
const (
	sqlWOps = `INSERT INTO ops (run_seq, position, kind, name, done, result, error, attempts, started_at, finished_at)
	SELECT $1, x.* FROM unnest($2::int4[], $3::text[], $4::text[], $5::bool[], $6::bytea[], $7::text[],
		$8::int4[], $9::timestamptz[], $10::timestamptz[]) AS x
	ON CONFLICT (run_seq, position) DO UPDATE SET kind = excluded.kind, name = excluded.name,
		done = excluded.done, result = excluded.result, error = excluded.error,
		attempts = excluded.attempts, started_at = excluded.started_at, finished_at = excluded.finished_at`
	sqlWAttempts = `INSERT INTO attempts (run_seq, position, attempt, error, started_at, finished_at, outcome)
	SELECT $1, x.* FROM unnest($2::int4[], $3::int4[], $4::text[], $5::timestamptz[], $6::timestamptz[], $7::text[]) AS x
	ON CONFLICT (run_seq, position, attempt) DO UPDATE SET error = excluded.error,
		started_at = excluded.started_at, finished_at = excluded.finished_at, outcome = excluded.outcome`
	sqlWKVSet = `INSERT INTO kv (run_seq, key, value) SELECT $1, x.* FROM unnest($2::text[], $3::bytea[]) AS x
	ON CONFLICT (run_seq, key) DO UPDATE SET value = excluded.value`
	sqlWKVDelete = `DELETE FROM kv WHERE run_seq = $1 AND key = ANY($2::text[])`
)

// usesWaiting reports whether a checkpoint needs the waiting path.
func usesWaiting(p *store.CheckpointParams) bool {
	return len(p.WaitEvents) > 0 || len(p.NoEvents) > 0 || len(p.Consume) > 0 ||
		len(p.Children) > 0 || len(p.Approvals) > 0 || len(p.ExpireApprovals) > 0
}

// ckRow is what a checkpoint's fenced status update returns.
type ckRow struct {
	seq       int64
	cancel    bool
	parentSeq *int64 // of a child run
	position  *int32
}

// checkpointWaiting writes a checkpoint through the waiting path. Any error rolls
// its transaction back: a stale lease (store.ErrLeaseLost), an event NoEvents names
// (store.ErrConflict), an invalid Consume or a taken approval ID
// (store.ErrInvalidParams), a taken child ID (store.ErrRunExists) write nothing.
func (s *Store) checkpointWaiting(ctx context.Context, ck *ckReq) (*store.CheckpointResult, error) {
	p, l := ck.p, ck.p.Lease // validated by newCkReq
	var res *store.CheckpointResult
	orig := ck
	err := s.inTx(ctx, func(tx *wtx) error {
		ck, p = orig, orig.p // a transaction may be tried again
		var plan *store.RetryPlan
		if p.Status == store.StatusFailed {
			var err error
			if plan, err = planRetry(tx, p); err != nil { // see wfretry.go
				return err
			}
			if plan != nil {
				if ck, err = newCkReq(tx.now, plan.Checkpoint); err != nil {
					return err
				}
				p = ck.p
			}
		}
		if p.Status.Terminal() { // a child's parent and group before the child
			if err := lockFamiliesOf(tx, []*ckReq{ck}); err != nil {
				return err
			}
		}
		row, err := setWaitingStatus(tx, ck)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: run %q token %d", store.ErrLeaseLost, l.RunID, l.Token)
		}
		if err != nil {
			return fmt.Errorf("updating run: %w", err)
		}
		if err := writeCheckpoint(tx, row, ck); err != nil {
			return err
		}
		if plan != nil {
			if err := retryWrites(tx, row.seq, plan); err != nil {
				return err
			}
		}
		if err := shared.StreamAppend(stx{tx}, row.seq, l.Namespace, l.RunID, p.Stream); err != nil {
			return err
		}
		if p.Status.Terminal() && row.parentSeq != nil {
			if err := childEnded(tx, *row.parentSeq, int(*row.position), p.Status, false); err != nil {
				return err
			}
		}
		if row.cancel && !p.Status.Terminal() {
			if err := shared.CancelAfterCheckpoint(stx{tx}, row.seq, p); err != nil {
				return err
			}
		}
		if p.Status != store.StatusRunning {
			tx.publish(store.RunTopic(l.Namespace, l.RunID))
		}
		if p.Status == store.StatusPending || p.Status == store.StatusWaiting {
			tx.publish(store.TopicReady)
		}
		res = &store.CheckpointResult{CancelRequested: row.cancel, At: tx.now}
		if plan != nil {
			res = plan.Result(res)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("checkpointing: %w", err)
	}
	return res, nil
}

// setWaitingStatus moves the run to the checkpoint's status if the lease is
// current, locking its row. It returns pgx.ErrNoRows when the lease is not current.
func setWaitingStatus(tx *wtx, ck *ckReq) (ckRow, error) {
	p, l := ck.p, ck.p.Lease
	args := []any{l.Namespace, l.RunID, l.Token, tx.now}
	var query string
	switch p.Status {
	case store.StatusRunning: // the row does not change: only locked
		query, args = sqlWCkRunning, args[:3]
		if p.Seq > 0 {
			query, args = sqlWCkRunningGuarded, append(args, tx.now)
		}
	case store.StatusWaiting:
		var events []string
		if len(p.WaitEvents) > 0 {
			events = p.WaitEvents
		}
		query, args = sqlWCkWaiting, append(args, timePtrArg(p.WakeAt), ck.reason, events)
	case store.StatusBlocked:
		query, args = sqlWCkBlocked, append(args, ck.errText, ck.reason)
	case store.StatusPending:
		query = sqlWCkPending
	default: // terminal
		query, args = sqlWCkFinished, append(args, string(p.Status), p.Output, ck.errText)
	}
	if query != sqlWCkRunning {
		args = append(args, p.Seq, p.Fingerprint)
	}
	var r ckRow
	err := tx.queryRow(query, args...).Scan(&r.seq, &r.cancel, &r.parentSeq, &r.position)
	return r, err
}

// pipelined is one statement of a pipelined batch and what to make of its result.
type pipelined struct {
	sql  string
	args []any
	// check maps the statement's outcome to the checkpoint's error (nil: err).
	check func(pgconn.CommandTag, error) error
}

// writeCheckpoint sends a checkpoint's other writes in one round trip: NoEvents
// guard, history, consumed events, approvals, children, and the check of a wait
// whose event is already in the inbox.
func writeCheckpoint(tx *wtx, row ckRow, ck *ckReq) error {
	p := ck.p
	var q []pipelined
	add := func(sql string, check func(pgconn.CommandTag, error) error, args ...any) {
		q = append(q, pipelined{sql: sql, args: args, check: check})
	}
	if len(p.NoEvents) > 0 {
		// The run's row is locked: no event can arrive between this check and commit.
		add(sqlEventsConflict, conflictCheck, row.seq, p.NoEvents, orEmpty(p.Consume))
	}
	if len(ck.ops.pos) > 0 {
		add(sqlWOps, nil, append([]any{row.seq}, ck.ops.args()...)...)
	}
	if len(ck.atts.pos) > 0 {
		add(sqlWAttempts, nil, append([]any{row.seq}, ck.atts.args()...)...)
	}
	if len(ck.kv.setKeys) > 0 {
		add(sqlWKVSet, nil, row.seq, ck.kv.setKeys, ck.kv.vals)
	}
	if len(ck.kv.delKeys) > 0 {
		add(sqlWKVDelete, nil, row.seq, ck.kv.delKeys)
	}
	if len(p.Consume) > 0 {
		add(sqlEventsConsume, consumeCheck(len(p.Consume)), row.seq, p.Consume)
	}
	for _, a := range p.Approvals {
		st, err := shared.ApprovalInsert(p.Lease.Namespace, row.seq, a, tx.now)
		if err != nil {
			return err
		}
		add(st.SQL, approvalCheck(a.ID), st.Args...)
	}
	if len(p.ExpireApprovals) > 0 {
		st, err := shared.ApprovalsExpire(row.seq, p.ExpireApprovals, tx.now)
		if err != nil {
			return err
		}
		add(st.SQL, nil, st.Args...)
	}
	if err := runPipeline(tx, q); err != nil {
		return err
	}
	if len(p.Children) > 0 {
		parent := parentRef{Seq: row.seq, Namespace: p.Lease.Namespace, ID: p.Lease.RunID}
		if err := createChildren(tx, parent, p.Children); err != nil {
			return err
		}
	}
	if p.Status == store.StatusWaiting && len(p.WaitEvents) > 0 {
		// An event it waits for is already in the inbox: due now instead.
		if _, err := tx.exec(sqlWakeIfInbox, tx.now, row.seq); err != nil {
			return fmt.Errorf("reading inbox: %w", err)
		}
	}
	return nil
}

// runPipeline sends q in one round trip and checks each result in order.
func runPipeline(tx *wtx, q []pipelined) error {
	if len(q) == 0 {
		return nil
	}
	b := &pgx.Batch{}
	for _, st := range q {
		b.Queue(st.sql, st.args...)
	}
	br := tx.SendBatch(tx.ctx, b)
	defer br.Close()
	for _, st := range q {
		tag, err := br.Exec()
		if st.check != nil {
			err = st.check(tag, err)
		}
		if err != nil {
			return err
		}
	}
	return br.Close()
}

// sqlEventsConflict returns a row when the inbox of run $1 holds an event named in
// $2 other than those of $3; conflictCheck maps that to store.ErrConflict.
const sqlEventsConflict = `SELECT 1 FROM events WHERE run_seq = $1 AND name = ANY($2::text[])
	AND NOT (seq = ANY($3::int8[])) LIMIT 1`

func conflictCheck(tag pgconn.CommandTag, err error) error {
	if err == nil && tag.RowsAffected() > 0 {
		return fmt.Errorf("%w: an event named in NoEvents is in the inbox", store.ErrConflict)
	}
	return err
}

func consumeCheck(want int) func(pgconn.CommandTag, error) error {
	return func(tag pgconn.CommandTag, err error) error {
		if err == nil && int(tag.RowsAffected()) != want {
			return fmt.Errorf("%w: Consume: %d of %d events are not in the run's inbox",
				store.ErrInvalidParams, want-int(tag.RowsAffected()), want)
		}
		return err
	}
}
