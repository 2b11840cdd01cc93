package storesqlite

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// Workflow retries (store/retry.go): a checkpoint that fails its run reads
// what decides a retry first; a retry writes the checkpoint as a wait instead,
// resets the run's failed steps and appends the failed attempt to the run's
// retry column.
const (
	// sqlRetryRow reads, under the lease, what decides a retry.
	sqlRetryRow = `SELECT retry, started_at, deadline, cancel_requested FROM runs
	WHERE namespace = ?1 AND id = ?2 AND status = 'running' AND lease_token = ?3`
	// sqlResetFailedSteps makes the run's failed steps in progress again, due
	// at ?1, keeping their attempts; an at-most-once step whose outcome is
	// unknown keeps its failure (it is never run again).
	sqlResetFailedSteps = `UPDATE ops SET done = 0, error = NULL, finished_at = NULL, started_at = ?1
	WHERE run_seq = ?2 AND kind = 'step' AND done = 1 AND error IS NOT NULL
	AND error NOT LIKE '%"type":"step_outcome_unknown"%'
	RETURNING position, name, attempts`
	sqlSetRetry = `UPDATE runs SET retry = ?1 WHERE sequence = ?2`
)

// planRetry returns the retry that failing checkpoint p becomes, or nil when
// the run fails (or the lease is not current: the fenced update finds out).
func planRetry(tx *wtx, p *store.CheckpointParams) (*store.RetryPlan, error) {
	l := p.Lease
	var (
		text           sql.NullString
		started, dline sql.NullInt64
		row            store.RetryRow
	)
	err := tx.queryRow(sqlRetryRow, l.Namespace, l.RunID, l.Token).Scan(&text, &started, &dline, &row.Cancel)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading run: %w", err)
	}
	var run store.Run
	if err := store.DecodeRetryState(text.String, text.Valid, &run); err != nil {
		return nil, err
	}
	row.State = store.RetryState{Policy: run.Retry, Attempts: run.WorkflowAttempts}
	row.StartedAt, row.Deadline = fromNS(started), fromNSPtr(dline)
	return store.PlanRetry(p, &row, tx.now), nil
}

// recordRetry writes what retry plan adds to its checkpoint, written as a
// wait on the run of sequence seq: the reset of the run's failed steps and
// the run's retry column.
func recordRetry(tx *wtx, plan *store.RetryPlan, seq int64) error {
	p := plan.Checkpoint
	var steps []store.RetriedStep
	rows, err := tx.query(sqlResetFailedSteps, p.WakeAt.UnixNano(), seq)
	if err != nil {
		return fmt.Errorf("resetting failed steps: %w", err)
	}
	for rows.Next() {
		var s store.RetriedStep
		if err := rows.Scan(&s.Position, &s.Name, &s.Attempts); err != nil {
			rows.Close()
			return err
		}
		steps = append(steps, s)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("resetting failed steps: %w", err)
	}
	plan.SetSteps(steps)
	col, err := plan.Column()
	if err != nil {
		return err
	}
	if _, err := tx.exec(sqlSetRetry, col, seq); err != nil {
		return fmt.Errorf("recording the run attempt: %w", err)
	}
	return nil
}
