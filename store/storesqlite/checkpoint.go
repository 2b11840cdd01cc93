package storesqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

const (
	sqlOpUpsert = `INSERT INTO ops (run_seq, position, kind, name, done, result, error,
	attempts, started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (run_seq, position) DO UPDATE SET kind = excluded.kind, name = excluded.name,
	done = excluded.done, result = excluded.result, error = excluded.error,
	attempts = excluded.attempts, started_at = excluded.started_at,
	finished_at = excluded.finished_at`
	sqlAttemptInsert = `INSERT INTO attempts (run_seq, position, attempt, error, started_at,
	finished_at) VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING`
	sqlKVSet = `INSERT INTO kv (run_seq, key, value) VALUES (?, ?, ?)
	ON CONFLICT (run_seq, key) DO UPDATE SET value = excluded.value`
	sqlKVDelete = `DELETE FROM kv WHERE run_seq = ? AND key = ?`
)

// Run state changes of a checkpoint. Each is fenced: it changes the run only if
// the lease (?2 namespace, ?3 run ID, ?4 token) is current, so it doubles as the
// lease check. ?1 is now.
const (
	ckWhere = ` WHERE namespace = ?2 AND id = ?3 AND status = 'running' AND lease_token = ?4`
	ckFence = ckWhere + ` RETURNING sequence, cancel_requested, stream_seq`
	// sqlCkRunning only checks the lease: a checkpoint that keeps the run running
	// changes nothing in its row (UpdatedAt tracks changes of state), unless it
	// appends stream events (sqlCkRunningStream).
	sqlCkRunning = `SELECT sequence, cancel_requested, stream_seq FROM runs` + ckWhere
	// sqlCkRunningStream takes the sequences of ?5 stream events.
	sqlCkRunningStream = `UPDATE runs SET stream_seq = stream_seq + ?5` + ckFence
	// sqlCkWaiting hands a run whose cancellation was requested back instead
	// (pending, due now): waiting, it would keep the cancellation until the wait
	// ended on its own.
	sqlCkWaiting = `UPDATE runs SET
	status = CASE WHEN cancel_requested THEN 'pending' ELSE 'waiting' END,
	available_at = CASE WHEN cancel_requested THEN ?1 ELSE ?5 END,
	wait_reason = CASE WHEN cancel_requested THEN '' ELSE ?6 END,
	wait_events = CASE WHEN cancel_requested THEN NULL ELSE ?7 END,
	lease_owner = '', lease_expires_at = NULL, updated_at = ?1, stream_seq = stream_seq + ?8` + ckFence
	sqlCkBlocked = `UPDATE runs SET status = 'blocked', error = ?5, wait_reason = ?6,
	lease_owner = '', lease_expires_at = NULL, updated_at = ?1, stream_seq = stream_seq + ?7` + ckFence
	sqlCkPending = `UPDATE runs SET status = 'pending', available_at = ?1, wait_reason = '',
	lease_owner = '', lease_expires_at = NULL, updated_at = ?1, stream_seq = stream_seq + ?5` + ckFence
	// sqlCkFinished also returns the run's place in a parent's group (NULLs for a
	// run that is no child), so that a child's end is counted without a query.
	sqlCkFinished = `UPDATE runs SET status = ?5, output = ?6, error = ?7, wait_reason = '',
	lease_owner = '', lease_expires_at = NULL, finished_at = ?1, updated_at = ?1,
	stream_seq = stream_seq + ?8` + ckWhere + ` RETURNING sequence, cancel_requested, stream_seq, parent_seq, parent_position`
)

// Checkpoint implements store.Store.
func (s *Store) Checkpoint(ctx context.Context, p *store.CheckpointParams) (*store.CheckpointResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("checkpointing: %w", err)
	}
	errText, err := errJSON(p.Error)
	if err != nil {
		return nil, fmt.Errorf("checkpointing: %w", err)
	}
	var res *store.CheckpointResult
	err = s.write(ctx, func(tx *wtx) error {
		var err error
		res, err = checkpoint(tx, p, errText)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("checkpointing: %w", err)
	}
	return res, nil
}

// ckRow is what a checkpoint's fenced status update returns.
type ckRow struct {
	seq                 int64
	cancel              bool
	streamSeq           int64         // the run's last stream sequence, after this checkpoint's events
	parentSeq, position sql.NullInt64 // of a child run that finished
}

// checkpoint writes a checkpoint. The NoEvents guard is checked before anything
// is written; the fenced status update is the lease check. Failures after it
// (an invalid Consume, a taken child ID) leave the request dirty, so its batch
// is replayed with savepoints and the checkpoint writes nothing.
func checkpoint(tx *wtx, p *store.CheckpointParams, errText any) (*store.CheckpointResult, error) {
	l := p.Lease
	if len(p.NoEvents) > 0 {
		if err := checkNoEvents(tx, l.Namespace, l.RunID, p.NoEvents, p.Consume); err != nil {
			return nil, err
		}
	}
	ck, err := setCheckpointStatus(tx, p, errText)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: run %q token %d", store.ErrLeaseLost, l.RunID, l.Token)
	}
	if err != nil {
		return nil, fmt.Errorf("updating run: %w", err)
	}
	if err := writeHistory(tx, ck.seq, p); err != nil {
		return nil, err
	}
	if err := shared.StreamInsert(tx, ck.seq, ck.streamSeq, l.Namespace, l.RunID, p.Stream); err != nil {
		return nil, err
	}
	if err := writeWaiting(tx, ck, p); err != nil {
		return nil, err
	}
	if p.Status != store.StatusRunning {
		tx.publish(store.RunTopic(l.Namespace, l.RunID))
	}
	if p.Status == store.StatusPending || p.Status == store.StatusWaiting {
		tx.publish(store.TopicReady)
	}
	at := fromNS(sql.NullInt64{Int64: tx.now.UnixNano(), Valid: true})
	return &store.CheckpointResult{CancelRequested: ck.cancel, At: at}, nil
}

// writeWaiting applies a checkpoint's events, children and approvals, and counts
// a finished child in its group. Each part runs only when the checkpoint uses it.
func writeWaiting(tx *wtx, ck ckRow, p *store.CheckpointParams) error {
	if len(p.Consume) > 0 {
		if err := consumeEvents(tx, ck.seq, p.Consume); err != nil {
			return err
		}
	}
	if len(p.Approvals) > 0 {
		if err := createApprovals(tx, p.Lease.Namespace, ck.seq, p.Approvals); err != nil {
			return err
		}
	}
	if len(p.ExpireApprovals) > 0 {
		if err := expireApprovals(tx, ck.seq, p.ExpireApprovals); err != nil {
			return err
		}
	}
	if len(p.Children) > 0 {
		parent := parentRef{Seq: ck.seq, Namespace: p.Lease.Namespace, ID: p.Lease.RunID}
		if err := createChildren(tx, parent, p.Children); err != nil {
			return err
		}
	}
	if p.Status == store.StatusWaiting && len(p.WaitEvents) > 0 {
		// An event it waits for is already in the inbox: due now instead.
		if _, err := tx.exec(sqlWakeIfInbox, tx.now.UnixNano(), ck.seq); err != nil {
			return fmt.Errorf("reading inbox: %w", err)
		}
	}
	if p.Status.Terminal() && ck.parentSeq.Valid {
		return childEnded(tx, ck.parentSeq.Int64, int(ck.position.Int64), p.Status, false)
	}
	if ck.cancel && !p.Status.Terminal() {
		return shared.CancelAfterCheckpoint(tx, ck.seq, p)
	}
	return nil
}

// writeHistory saves a checkpoint's ops, attempts and run-store writes.
func writeHistory(tx *wtx, seq int64, p *store.CheckpointParams) error {
	for _, op := range p.Ops {
		e, err := errJSON(op.Error)
		if err != nil {
			return err
		}
		if _, err := tx.exec(sqlOpUpsert, seq, op.Position, string(op.Kind), op.Name,
			boolInt(op.Done), blob(op.Result), e, op.Attempts, ns(op.StartedAt),
			nsPtr(op.FinishedAt)); err != nil {
			return fmt.Errorf("saving op %d: %w", op.Position, err)
		}
	}
	for _, a := range p.Attempts {
		e, err := errJSON(&a.Error)
		if err != nil {
			return err
		}
		if _, err := tx.exec(sqlAttemptInsert, seq, a.Position, a.Attempt, e,
			ns(a.StartedAt), ns(a.FinishedAt)); err != nil {
			return fmt.Errorf("saving attempt %d of op %d: %w", a.Attempt, a.Position, err)
		}
	}
	for _, kv := range p.KV {
		var err error
		if kv.Delete {
			_, err = tx.exec(sqlKVDelete, seq, kv.Key)
		} else {
			_, err = tx.exec(sqlKVSet, seq, kv.Key, nonNilBlob(kv.Value))
		}
		if err != nil {
			return fmt.Errorf("writing key %q: %w", kv.Key, err)
		}
	}
	return nil
}

// setCheckpointStatus moves the run to the checkpoint's status if the lease is
// current. It returns sql.ErrNoRows when the lease is not current.
func setCheckpointStatus(tx *wtx, p *store.CheckpointParams, errText any) (ckRow, error) {
	l := p.Lease
	fence := []any{tx.now.UnixNano(), l.Namespace, l.RunID, l.Token}
	var ck ckRow
	dest := []any{&ck.seq, &ck.cancel, &ck.streamSeq}
	n := len(p.Stream) // each status update takes the sequences of the checkpoint's stream events
	var row scanner
	switch p.Status {
	case store.StatusRunning:
		if n > 0 {
			row = tx.queryRow(sqlCkRunningStream, append(fence, n)...)
		} else {
			row = tx.queryRow(sqlCkRunning, fence...)
		}
	case store.StatusWaiting:
		var events any
		if len(p.WaitEvents) > 0 {
			list, err := jsonList(p.WaitEvents)
			if err != nil {
				return ck, err
			}
			events = list
		}
		row = tx.queryRow(sqlCkWaiting, append(fence, nsPtr(p.WakeAt), p.WaitReason, events, n)...)
	case store.StatusBlocked:
		reason := p.WaitReason
		if reason == "" && p.Error != nil {
			reason = p.Error.Message
		}
		row = tx.queryRow(sqlCkBlocked, append(fence, errText, reason, n)...)
	case store.StatusPending:
		row = tx.queryRow(sqlCkPending, append(fence, n)...)
	default: // terminal
		row = tx.queryRow(sqlCkFinished, append(fence, string(p.Status), blob(p.Output), errText, n)...)
		dest = append(dest, &ck.parentSeq, &ck.position)
	}
	return ck, row.Scan(dest...)
}
