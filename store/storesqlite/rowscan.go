package storesqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// runCols are the columns scanRun reads, in order.
const runCols = sqlstore.RunCols

// scanner is *sql.Row, *sql.Rows or the writer's rows.
type scanner = sqlstore.Scanner

// scanRun reads runCols into a Run and returns it with its lease token.
func scanRun(sc scanner) (*store.Run, int64, error) { return sqlstore.ScanRun(sc) }

// refSeq is the sequence of the run a Ref names: the run with that ID in the
// namespace, else the latest run with that workflow ID. NULL when none matches.
var refSeq = shared.Rebind(sqlstore.RefSeq)

// runByRef resolves a Ref to its run, or store.ErrRunNotFound.
func runByRef(ctx context.Context, q querier, namespace, ref string) (*store.Run, error) {
	return shared.RunByRef(sq{ctx, q}, namespace, ref)
}

const sqlOps = `SELECT position, kind, name, done, result, error, attempts, started_at,
	finished_at FROM ops WHERE run_seq = ? ORDER BY position`

const sqlAttempts = `SELECT position, attempt, error, started_at, finished_at, outcome
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
	for _, op := range ops {
		op.TakeSucceededAttempt()
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
		if op.Error, err = sqlstore.ErrFromJSON(errText); err != nil {
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
		if err := rows.Scan(&a.Position, &a.Attempt, &errText, &started, &fin, &a.Outcome); err != nil {
			return nil, err
		}
		e, err := sqlstore.ErrFromJSON(sql.NullString{String: errText, Valid: true})
		if err != nil {
			return nil, err
		}
		a.Error, a.StartedAt, a.FinishedAt = *e, fromNS(started), fromNS(fin)
		a.NormalizeOutcome()
		atts = append(atts, a)
	}
	return atts, rows.Err()
}
