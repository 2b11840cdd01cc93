package storepg

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// sqlRunsOfWorkflowIDs is the runs of namespace $1 with the workflow IDs $2
// (sqlstore.Dialect.RunsOfWorkflowIDs). Each workflow ID is looked up on its
// own, as sqlRunsGet looks up IDs: with "workflow_id = ANY($2)" the planner of a
// table without statistics walked the whole namespace (2 ms per batch of starts
// at 20,000 runs, and growing). The runs started with that workflow ID are in
// runs_workflow_id, the one started without one whose ID it is in
// runs_namespace_id (workflowIDIs).
const sqlRunsOfWorkflowIDs = `SELECT r.* FROM (SELECT DISTINCT unnest($2::text[])) AS x(wid)
	CROSS JOIN LATERAL (SELECT ` + sqlstore.RunCols + ` FROM runs WHERE namespace = $1 AND workflow_id = x.wid AND workflow_id <> id
		UNION ALL SELECT ` + sqlstore.RunCols + ` FROM runs WHERE namespace = $1 AND id = x.wid AND workflow_id = id) AS r`

// workflowIDIs is sqlstore.Dialect.WorkflowIDIs: runs_workflow_id holds only the
// runs whose workflow ID is not their run ID (migration 0019); the others are
// found by ID. Each arm names its index's condition, so that the planner can
// read each index (a BitmapOr of two index scans); the query's own namespace
// condition serves both.
func workflowIDIs(_, param string) string {
	return "((workflow_id = " + param + " AND workflow_id <> id) OR (id = " + param + " AND workflow_id = id))"
}

// implicitFree is the condition an insert of a run (namespace ns, run ID id,
// workflow ID wid, SQL expressions) adds for the one-active-run-per-workflow-ID
// rule: runs_active_workflow_id holds only the runs started with a workflow ID,
// so a run started with workflow ID W checks that no active run started without
// one has the ID W. (The other way round needs no check: a run started without
// a workflow ID has a fresh run ID, which no workflow ID names by chance.)
func implicitFree(ns, id, wid string) string {
	return "(" + wid + " = " + id + " OR NOT EXISTS (SELECT 1 FROM runs k WHERE k.namespace = " + ns +
		" AND k.id = " + wid + " AND k.workflow_id = k.id AND k.status NOT IN ('succeeded', 'failed', 'cancelled')))"
}

// shared is the logic both SQL drivers share (store/internal/sqlstore), in
// Postgres' dialect.
var shared = sqlstore.New(sqlstore.Dialect{
	Param: func(n int) string { return "$" + strconv.Itoa(n) },
	Time: func(t time.Time) any {
		if t.IsZero() {
			return nil
		}
		return t
	},
	InList: func(expr, param string) string { return expr + " = ANY(" + param + "::text[])" },
	List:   func(list []string) (any, error) { return orEmpty(list), nil },
	TextList: func(col string) string {
		return "array_to_json(" + col + ")::text"
	},
	IsUniqueViolation: isUniqueViolation,
	RunsOfWorkflowIDs: sqlRunsOfWorkflowIDs,
	RunsGet:           sqlRunsGet,
	WorkflowIDIs:      workflowIDIs,
	// The run's flag is set in a CTE: data-modifying CTEs run whether or not
	// the statement reads them.
	EventInsert: `WITH flag AS (UPDATE runs SET has_events = true WHERE sequence = $1 AND NOT has_events)
	INSERT INTO events (run_seq, name, payload, sent_at) VALUES ($1, $2, $3, $4) RETURNING seq`,
	ListsByStatus: true, // 0018_drop_runs_list.sql
	RunningApart:  true, // 0029_claims_spare_indexes.sql
	RunningRuns: func(ns string) string {
		return "(SELECT * FROM runs WHERE namespace = " + ns + " AND status = 'running' OFFSET 0) AS runs"
	},
	// WakeOnEvent also forgets the names the run waited for (see 0002_waiting.sql).
	WakeOnEvent: `UPDATE runs SET status = 'pending', available_at = $1, wait_reason = '',
	wait_events = NULL, updated_at = $1 WHERE sequence = $2 AND status = 'waiting' AND $3 = ANY(wait_events)
	RETURNING namespace, id`,
	// ReleaseHeld releases up to $5 held children of a group, from item $4 on,
	// in item order. The children are found and locked in the materialized CTE,
	// through runs_children, and updated by sequence: with filters on the updated
	// rows themselves, the planner of a table without statistics may walk every held
	// run (runs_pending_available) and probe the children for each, ~100 ms with
	// 10,000 held children instead of well under one.
	SchemaMigrations: `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER     PRIMARY KEY,
	name       TEXT        NOT NULL,
	applied_at TIMESTAMPTZ NOT NULL
)`,
	ReleaseHeld: `WITH picked AS MATERIALIZED (
		SELECT sequence FROM runs WHERE parent_seq = $2 AND parent_position = $3
		AND item >= $4 AND status = 'pending' AND available_at IS NULL
		ORDER BY item LIMIT $5 FOR NO KEY UPDATE)
	UPDATE runs r SET available_at = $1, wait_reason = '', updated_at = $1
	FROM picked WHERE r.sequence = picked.sequence
	RETURNING r.item, r.namespace, r.id`,
	Lock: func(of ...string) string {
		if len(of) == 0 {
			return " FOR NO KEY UPDATE"
		}
		return " FOR NO KEY UPDATE OF " + strings.Join(of, ", ")
	},
})

// pgQuerier is what a pool, a connection and a transaction share.
type pgQuerier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// querier adapts a pool or a transaction to sqlstore.Querier.
type querier struct {
	ctx context.Context
	c   pgQuerier
}

// QueryRow implements sqlstore.Querier.
func (q querier) QueryRow(query string, args ...any) sqlstore.Scanner {
	return noRows{q.c.QueryRow(q.ctx, query, args...)}
}

// Query implements sqlstore.Querier.
func (q querier) Query(query string, args []any, each func(row sqlstore.Scanner) error) error {
	rows, err := q.c.Query(q.ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// Exec implements sqlstore.Querier.
func (q querier) Exec(query string, args ...any) (int64, error) {
	tag, err := q.c.Exec(q.ctx, query, args...)
	return tag.RowsAffected(), err
}

// noRows reports pgx.ErrNoRows as sqlstore.ErrNoRows.
type noRows struct{ row pgx.Row }

func (r noRows) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if errors.Is(err, pgx.ErrNoRows) {
		return sqlstore.ErrNoRows
	}
	return err
}

// stx adapts a transaction of the waiting path (txn.go) to sqlstore.Tx.
type stx struct{ tx *wtx }

// QueryRow implements sqlstore.Querier.
func (s stx) QueryRow(query string, args ...any) sqlstore.Scanner {
	return noRows{s.tx.queryRow(query, args...)}
}

// Query implements sqlstore.Querier.
func (s stx) Query(query string, args []any, each func(row sqlstore.Scanner) error) error {
	return querier{ctx: s.tx.ctx, c: s.tx.Tx}.Query(query, args, each)
}

// Exec implements sqlstore.Querier.
func (s stx) Exec(query string, args ...any) (int64, error) {
	return querier{ctx: s.tx.ctx, c: s.tx.Tx}.Exec(query, args...)
}

// Now implements sqlstore.Tx.
func (s stx) Now() time.Time { return s.tx.now }

// Publish implements sqlstore.Tx.
func (s stx) Publish(topics ...string) { s.tx.publish(topics...) }

// sqlRunsGet reads runs by ID; an empty $3 is any status.
//
// Each ID is looked up on its own, in a subquery that OFFSET 0 keeps the
// status filter out of, so that runs_namespace_id is the one index that fits.
// Written as one WHERE clause, the planner could read the runs of the wanted
// statuses through runs_status and filter them by ID: before the table has
// statistics (autovacuum off, or not yet run) it did, and so read every
// finished run of the namespace to find a few hundred.
const sqlRunsGet = `SELECT r.* FROM (SELECT DISTINCT unnest($2::text[])) AS x(id)
	CROSS JOIN LATERAL (SELECT ` + sqlstore.RunCols + ` FROM runs WHERE namespace = $1 AND id = x.id OFFSET 0) AS r
	WHERE cardinality($3::text[]) = 0 OR r.status = ANY($3::text[])`
