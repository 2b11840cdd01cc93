package storepg

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-dev/trellis/store"
)

// Workflow retries (store/retry.go): a checkpoint that fails its run takes
// the waiting path, which first reads what decides a retry; a retry writes the
// checkpoint as a wait instead, resets the run's failed steps and appends the
// failed attempt to the run's retry column.
// sqlRetryRow reads, under the lease, what decides a retry. It takes no
// lock: the fenced update that follows is the lease check, and a child
// locks its family first (lockFamiliesOf) when it fails.
var sqlRetryRow = `SELECT retry, started_at, deadline, cancel_requested FROM runs
	WHERE sequence = ` + seqOf("$1", "$2") + ` AND status = 'running' AND lease_token = $3`

const (
	// sqlResetFailedSteps makes the run's failed steps in progress again, due
	// at $1, keeping their attempts; an at-most-once step whose outcome is
	// unknown keeps its failure (it is never run again).
	sqlResetFailedSteps = `UPDATE ops SET done = false, error = NULL, finished_at = NULL, started_at = $1
	WHERE run_seq = $2 AND kind = 'step' AND done AND error IS NOT NULL
	AND error NOT LIKE '%"type":"step_outcome_unknown"%'
	RETURNING position, name, attempts`
	sqlSetRetry = `UPDATE runs SET retry = $1 WHERE sequence = $2`
)

// planRetry returns the retry that failing checkpoint p becomes, or nil when
// the run fails (or the lease is not current: the fenced update finds out).
func planRetry(tx *wtx, p *store.CheckpointParams) (*store.RetryPlan, error) {
	l := p.Lease
	var (
		text    *string
		started *time.Time
		row     store.RetryRow
	)
	err := tx.queryRow(sqlRetryRow, l.Namespace, l.RunID, l.Token).Scan(&text, &started, &row.Deadline, &row.Cancel)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading run: %w", err)
	}
	var run store.Run
	if text != nil {
		if err := store.DecodeRetryState(*text, true, &run); err != nil {
			return nil, err
		}
	}
	row.State = store.RetryState{Policy: run.Retry, Attempts: run.WorkflowAttempts}
	if started != nil {
		row.StartedAt = started.UTC()
	}
	return store.PlanRetry(p, &row, tx.now), nil
}

// retryWrites resets the failed steps of run seq and records plan's failed
// attempt in the run's retry column.
func retryWrites(tx *wtx, seq int64, plan *store.RetryPlan) error {
	rows, err := tx.query(sqlResetFailedSteps, *plan.Checkpoint.WakeAt, seq)
	if err != nil {
		return fmt.Errorf("resetting failed steps: %w", err)
	}
	var steps []store.RetriedStep
	for rows.Next() {
		var s store.RetriedStep
		if err := rows.Scan(&s.Position, &s.Name, &s.Attempts); err != nil {
			rows.Close()
			return fmt.Errorf("resetting failed steps: %w", err)
		}
		steps = append(steps, s)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
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
