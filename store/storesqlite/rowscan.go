package storesqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// runCols are the columns scanRun reads, in order.
const runCols = `namespace, id, workflow_id, workflow, queue, priority, status, version,
	sequence, input, output, error, wait_reason, cancel_requested, deadline, available_at,
	attempts, lease_owner, lease_token, lease_expires_at, created_at, started_at,
	updated_at, finished_at, parent_id`

// scanner is *sql.Row or *sql.Rows.
type scanner interface{ Scan(dest ...any) error }

// extraScan scans columns that follow runCols into extra.
type extraScan struct {
	sc    scanner
	extra []any
}

func (e extraScan) Scan(dest ...any) error { return e.sc.Scan(append(dest, e.extra...)...) }

// scanRun reads runCols into a Run and returns it with its lease token.
func scanRun(sc scanner) (*store.Run, int64, error) {
	var (
		r                                       store.Run
		errText                                 sql.NullString
		deadline, avail, leaseExp, started, fin sql.NullInt64
		created, updated                        int64
		token                                   int64
	)
	err := sc.Scan(&r.Namespace, &r.ID, &r.WorkflowID, &r.Workflow, &r.Queue, &r.Priority,
		&r.Status, &r.Version, &r.Sequence, &r.Input, &r.Output, &errText, &r.WaitReason,
		&r.CancelRequested, &deadline, &avail, &r.Attempts, &r.LeaseOwner, &token, &leaseExp,
		&created, &started, &updated, &fin, &r.ParentID)
	if err != nil {
		return nil, 0, err
	}
	if r.Error, err = errFromJSON(errText); err != nil {
		return nil, 0, err
	}
	r.Deadline = fromNSPtr(deadline)
	r.AvailableAt = fromNS(avail)
	r.LeaseExpiresAt = fromNSPtr(leaseExp)
	r.CreatedAt = fromNS(sql.NullInt64{Int64: created, Valid: true})
	r.StartedAt = fromNSPtr(started)
	r.UpdatedAt = fromNS(sql.NullInt64{Int64: updated, Valid: true})
	r.FinishedAt = fromNSPtr(fin)
	return &r, token, nil
}

// refSeq is the sequence of the run a Ref names: the run with that ID in the
// namespace, else the latest run with that workflow ID. NULL when none matches.
const refSeq = `COALESCE(
	(SELECT sequence FROM runs WHERE namespace = ?1 AND id = ?2),
	(SELECT MAX(sequence) FROM runs WHERE namespace = ?1 AND workflow_id = ?2))`

const sqlRunByRef = `SELECT ` + runCols + ` FROM runs WHERE sequence = ` + refSeq

// runByRef resolves a Ref to its run, or store.ErrRunNotFound.
func runByRef(ctx context.Context, q querier, namespace, ref string) (*store.Run, error) {
	r, _, err := scanRun(q.QueryRowContext(ctx, sqlRunByRef, namespace, ref))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%w: %q in namespace %q", store.ErrRunNotFound, ref, namespace)
	}
	return r, err
}

const sqlOps = `SELECT position, kind, name, done, result, error, attempts, started_at,
	finished_at FROM ops WHERE run_seq = ? ORDER BY position`

const sqlAttempts = `SELECT position, attempt, error, started_at, finished_at
	FROM attempts WHERE run_seq = ? ORDER BY position, attempt`

// history loads a run's ops in position order, each with its attempt log.
func history(ctx context.Context, q querier, runSeq int64) ([]*store.Op, error) {
	ops, err := loadOps(ctx, q, runSeq)
	if err != nil {
		return nil, fmt.Errorf("loading ops: %w", err)
	}
	atts, err := loadAttempts(ctx, q, runSeq)
	if err != nil {
		return nil, fmt.Errorf("loading attempts: %w", err)
	}
	byPos := make(map[int]*store.Op, len(ops))
	for _, op := range ops {
		byPos[op.Position] = op
	}
	for _, a := range atts {
		if op := byPos[a.Position]; op != nil {
			op.AttemptLog = append(op.AttemptLog, a)
		}
	}
	return ops, nil
}

func loadOps(ctx context.Context, q querier, runSeq int64) ([]*store.Op, error) {
	rows, err := q.QueryContext(ctx, sqlOps, runSeq)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	ops := []*store.Op{}
	for rows.Next() {
		var (
			op           store.Op
			errText      sql.NullString
			started, fin sql.NullInt64
		)
		if err := rows.Scan(&op.Position, &op.Kind, &op.Name, &op.Done, &op.Result, &errText,
			&op.Attempts, &started, &fin); err != nil {
			return nil, err
		}
		if op.Error, err = errFromJSON(errText); err != nil {
			return nil, err
		}
		op.StartedAt, op.FinishedAt = fromNS(started), fromNSPtr(fin)
		ops = append(ops, &op)
	}
	return ops, rows.Err()
}

func loadAttempts(ctx context.Context, q querier, runSeq int64) ([]store.Attempt, error) {
	rows, err := q.QueryContext(ctx, sqlAttempts, runSeq)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var atts []store.Attempt
	for rows.Next() {
		var (
			a            store.Attempt
			errText      string
			started, fin sql.NullInt64
		)
		if err := rows.Scan(&a.Position, &a.Attempt, &errText, &started, &fin); err != nil {
			return nil, err
		}
		e, err := errFromJSON(sql.NullString{String: errText, Valid: true})
		if err != nil {
			return nil, err
		}
		a.Error, a.StartedAt, a.FinishedAt = *e, fromNS(started), fromNS(fin)
		atts = append(atts, a)
	}
	return atts, rows.Err()
}
