package storesqlite

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// shared is the logic both SQL drivers share (store/internal/sqlstore), in
// SQLite's dialect: times are unix nanoseconds, lists JSON arrays, and the single
// writer needs no row locks.
var shared = sqlstore.New(sqlstore.Dialect{
	Param: func(n int) string { return "?" + strconv.Itoa(n) },
	Time:  func(t time.Time) any { return ns(t) },
	Next:  "?",
	InList: func(expr, param string) string {
		return expr + " IN (SELECT value FROM json_each(" + param + "))"
	},
	List:              func(list []string) (any, error) { return jsonList(append([]string{}, list...)) },
	TextList:          func(col string) string { return col },
	IsUniqueViolation: isUniqueViolation,
	RunningApart:      true,
	RunningRuns:       func(string) string { return "runs INDEXED BY runs_running" },
	RunsGet:           sqlRunsGet,
	// The runs started with one of the workflow IDs ?2 are in runs_workflow_id,
	// those started without one whose ID it is in runs_namespace_id (migration
	// 0029: workflowIDIs).
	RunsOfWorkflowIDs: `SELECT ` + sqlstore.RunCols + ` FROM runs
	WHERE namespace = ?1 AND workflow_id IN (SELECT value FROM json_each(?2)) AND workflow_id <> id
	UNION ALL SELECT ` + sqlstore.RunCols + ` FROM runs
	WHERE namespace = ?1 AND id IN (SELECT value FROM json_each(?2)) AND workflow_id = id`,
	WorkflowIDIs: workflowIDIs,
	EventInsert:  `INSERT INTO events (run_seq, name, payload, sent_at) VALUES (?1, ?2, ?3, ?4) RETURNING seq`,
	WakeOnEvent: `UPDATE runs SET status = 'pending', available_at = ?1, wait_reason = '',
	updated_at = ?1 WHERE sequence = ?2 AND status = 'waiting'
	AND EXISTS (SELECT 1 FROM json_each(wait_events) WHERE value = ?3) RETURNING namespace, id`,
	SchemaMigrations: `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL
)`,
	ReleaseHeld: `UPDATE runs SET available_at = ?1, wait_reason = '', updated_at = ?1
	WHERE sequence IN (SELECT sequence FROM runs WHERE parent_seq = ?2 AND parent_position = ?3
	AND item >= ?4 AND status = 'pending' AND available_at IS NULL ORDER BY item LIMIT ?5)
	RETURNING item, namespace, id`,
	Lock: func(...string) string { return "" },
})

// workflowIDIs is sqlstore.Dialect.WorkflowIDIs: runs_workflow_id holds only the
// runs whose workflow ID is not their run ID (migration 0029); the others are
// found by ID. The runs are found by sequence from the two lookups, each
// reading its index: written as an OR of the two conditions, the query let
// SQLite walk the namespace's runs in list order instead (it plans each arm of
// an OR apart, and preferred the order to the arms).
func workflowIDIs(ns, param string) string {
	return "sequence IN (SELECT sequence FROM runs WHERE namespace = " + ns + " AND workflow_id = " + param +
		" AND workflow_id <> id UNION ALL SELECT sequence FROM runs WHERE namespace = " + ns + " AND id = " + param +
		" AND workflow_id = id)"
}

// errReadOnly: a statement that writes was run on the read pool.
var errReadOnly = errors.New("writing through the read pool")

// sq adapts the read pool or the write transaction to sqlstore.Querier.
type sq struct {
	ctx context.Context
	q   querier
}

// QueryRow implements sqlstore.Querier.
func (a sq) QueryRow(query string, args ...any) sqlstore.Scanner {
	return a.q.QueryRowContext(a.ctx, query, args...)
}

// Query implements sqlstore.Querier.
func (a sq) Query(query string, args []any, each func(row sqlstore.Scanner) error) error {
	rows, err := a.q.QueryContext(a.ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := each(rows); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	return rows.Close()
}

// Exec implements sqlstore.Querier: only the write transaction writes.
func (a sq) Exec(query string, args ...any) (int64, error) {
	tx, ok := a.q.(*wtx)
	if !ok {
		return 0, errReadOnly
	}
	return tx.Exec(query, args...)
}

// Exec implements sqlstore.Querier.
func (tx *wtx) Exec(query string, args ...any) (int64, error) {
	res, err := tx.exec(query, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// QueryRow implements sqlstore.Querier.
func (tx *wtx) QueryRow(query string, args ...any) sqlstore.Scanner {
	return tx.queryRow(query, args...)
}

// Query implements sqlstore.Querier.
func (tx *wtx) Query(query string, args []any, each func(row sqlstore.Scanner) error) error {
	return sq{ctx: context.Background(), q: tx}.Query(query, args, each)
}

// Now implements sqlstore.Tx.
func (tx *wtx) Now() time.Time { return tx.now }

// Publish implements sqlstore.Tx.
func (tx *wtx) Publish(topics ...string) { tx.publish(topics...) }

// sqlRunsGet reads runs by ID through runs_namespace_id; ?3 is a JSON array of
// statuses, '[]' for any.
const sqlRunsGet = `SELECT ` + sqlstore.RunCols + ` FROM runs
	WHERE namespace = ?1 AND id IN (SELECT value FROM json_each(?2))
	AND (?3 = '[]' OR status IN (SELECT value FROM json_each(?3)))`
