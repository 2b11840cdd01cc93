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
	ckFence      = ` WHERE namespace = ?2 AND id = ?3 AND status = 'running' AND lease_token = ?4 RETURNING sequence, cancel_requested`
	sqlCkRunning = `UPDATE runs SET updated_at = ?1` + ckFence
	sqlCkWaiting = `UPDATE runs SET status = 'waiting', available_at = ?5, wait_reason = ?6,
	lease_owner = '', lease_expires_at = NULL, updated_at = ?1` + ckFence
	sqlCkBlocked = `UPDATE runs SET status = 'blocked', error = ?5, wait_reason = ?6,
	lease_owner = '', lease_expires_at = NULL, updated_at = ?1` + ckFence
	sqlCkPending = `UPDATE runs SET status = 'pending', available_at = ?1, wait_reason = '',
	lease_owner = '', lease_expires_at = NULL, updated_at = ?1` + ckFence
	sqlCkFinished = `UPDATE runs SET status = ?5, output = ?6, error = ?7, wait_reason = '',
	lease_owner = '', lease_expires_at = NULL, finished_at = ?1, updated_at = ?1` + ckFence
)

// Checkpoint implements store.Store.
func (s *Store) Checkpoint(ctx context.Context, p *store.CheckpointParams) (*store.CheckpointResult, error) {
	if !p.Status.Valid() {
		return nil, fmt.Errorf("checkpointing: %w: Status: unknown status %q", store.ErrInvalidParams, p.Status)
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

func checkpoint(tx *wtx, p *store.CheckpointParams, errText any) (*store.CheckpointResult, error) {
	l := p.Lease
	seq, cancel, err := setCheckpointStatus(tx, p, errText)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: run %q token %d", store.ErrLeaseLost, l.RunID, l.Token)
	}
	if err != nil {
		return nil, fmt.Errorf("updating run: %w", err)
	}
	if err := writeHistory(tx, seq, p); err != nil {
		return nil, err
	}
	if p.Status != store.StatusRunning {
		tx.publish(store.RunTopic(l.Namespace, l.RunID))
	}
	if p.Status == store.StatusPending || p.Status == store.StatusWaiting {
		tx.publish(store.TopicReady)
	}
	at := fromNS(sql.NullInt64{Int64: tx.now.UnixNano(), Valid: true})
	return &store.CheckpointResult{CancelRequested: cancel, At: at}, nil
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
// current, returning the run's sequence and whether cancellation was requested.
// It returns sql.ErrNoRows when the lease is not current.
func setCheckpointStatus(tx *wtx, p *store.CheckpointParams, errText any) (seq int64, cancel bool, err error) {
	l := p.Lease
	fence := []any{tx.now.UnixNano(), l.Namespace, l.RunID, l.Token}
	var row scanner
	switch p.Status {
	case store.StatusRunning:
		row = tx.queryRow(sqlCkRunning, fence...)
	case store.StatusWaiting:
		row = tx.queryRow(sqlCkWaiting, append(fence, nsPtr(p.WakeAt), p.WaitReason)...)
	case store.StatusBlocked:
		reason := p.WaitReason
		if reason == "" && p.Error != nil {
			reason = p.Error.Message
		}
		row = tx.queryRow(sqlCkBlocked, append(fence, errText, reason)...)
	case store.StatusPending:
		row = tx.queryRow(sqlCkPending, fence...)
	default: // terminal
		row = tx.queryRow(sqlCkFinished, append(fence, string(p.Status), blob(p.Output), errText)...)
	}
	err = row.Scan(&seq, &cancel)
	return seq, cancel, err
}
