package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// dbPerRun names the workloads whose lines report, on Postgres, the WAL and the
// statements per run of their measured part (Result.WALBytesPerRun and
// Result.StatementsPerRun): those with nothing before or after it, so that
// reading the counters around the whole workload costs nothing and adds
// nothing to the figures.
var dbPerRun = map[string]bool{"w1": true, "w2": true, "w3": true}

// What StatementsPerRun counts, in Settings["statements_counted"].
const (
	countedStatements   = "pg_stat_statements.calls"
	countedTransactions = "pg_stat_database.xact_commit+xact_rollback"
)

// pgCounters reads a Postgres database's counters around a workload.
type pgCounters struct {
	conn *pgx.Conn
	// pgss is the qualified name of pg_stat_statements when it answers; ""
	// when it is not installed in the database or not loaded
	// (shared_preload_libraries): then transactions are counted instead.
	pgss string
}

// pgSnapshot is one reading of the counters.
type pgSnapshot struct {
	lsn        string // pg_current_wal_lsn()
	statements int64  // pg_stat_statements' calls in the database, or its transactions
}

// openPGCounters connects to the store's database and finds out what it can
// count; nil for another store.
func openPGCounters(ctx context.Context, storeURL string) (*pgCounters, error) {
	if !strings.HasPrefix(storeURL, "postgres") {
		return nil, nil
	}
	conn, err := pgConn(ctx, storeURL)
	if err != nil {
		return nil, fmt.Errorf("reading the database's counters: %w", err)
	}
	c := &pgCounters{conn: conn}
	var schema string
	err = conn.QueryRow(ctx, `SELECT n.nspname FROM pg_extension e JOIN pg_namespace n ON n.oid = e.extnamespace
		WHERE e.extname = 'pg_stat_statements'`).Scan(&schema)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		conn.Close(context.Background())
		return nil, fmt.Errorf("reading the database's counters: %w", err)
	default:
		// Installed; it answers only when the server loaded it at its start.
		name := pgx.Identifier{schema, "pg_stat_statements"}.Sanitize()
		if _, err := conn.Exec(ctx, `SELECT 1 FROM `+name+` LIMIT 1`); err == nil {
			c.pgss = name
		}
	}
	return c, nil
}

func (c *pgCounters) close() { c.conn.Close(context.Background()) }

// counted says what snapshot's statements counts (Settings["statements_counted"]).
func (c *pgCounters) counted() string {
	if c.pgss != "" {
		return countedStatements
	}
	return countedTransactions
}

// snapshot reads the counters. Without pg_stat_statements it first waits
// 1.5 s: Postgres publishes a session's transaction counts at most once a
// second, once the session is idle.
func (c *pgCounters) snapshot(ctx context.Context) (pgSnapshot, error) {
	q := `SELECT pg_current_wal_lsn()::text, (SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database())`
	if c.pgss != "" {
		q = `SELECT pg_current_wal_lsn()::text, (SELECT coalesce(sum(calls), 0)::bigint FROM ` + c.pgss + `
			WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()))`
	} else {
		select {
		case <-ctx.Done():
			return pgSnapshot{}, ctx.Err()
		case <-time.After(1500 * time.Millisecond):
		}
	}
	var s pgSnapshot
	if err := c.conn.QueryRow(ctx, q).Scan(&s.lsn, &s.statements); err != nil {
		return pgSnapshot{}, fmt.Errorf("reading the database's counters: %w", err)
	}
	return s, nil
}

// perRun sets res's WAL bytes and statements per run between the snapshots
// before and after (n runs).
func (c *pgCounters) perRun(ctx context.Context, res *Result, before, after pgSnapshot, n int) error {
	var wal int64
	if err := c.conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint`, after.lsn, before.lsn).Scan(&wal); err != nil {
		return fmt.Errorf("reading the database's counters: %w", err)
	}
	walPerRun := float64(wal) / float64(n)
	// Less the reading of before itself, counted in after.
	stmts := float64(after.statements-before.statements-1) / float64(n)
	res.WALBytesPerRun, res.StatementsPerRun = &walPerRun, &stmts
	if res.Settings == nil {
		res.Settings = map[string]any{}
	}
	res.Settings["statements_counted"] = c.counted()
	return nil
}
