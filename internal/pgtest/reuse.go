package pgtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	pgmigrations "github.com/trellis-dev/trellis/store/storepg/migrations"
)

// Reused schemas: a store's schema costs about 300 ms to create (the DDL of every
// migration) and 40 ms to drop, and emptying its tables much less, so suites that
// open hundreds of stores (the conformance suites) hand each test a schema that
// an earlier test of the process emptied. A schema is emptied only after its
// test's cleanups (the store's Close among them) have run; one that cannot be
// emptied is dropped instead.
var reuse = struct {
	mu    sync.Mutex
	base  string
	free  []string            // migrated schemas with empty tables
	all   []string            // every schema handed out, for DropReused
	stmts map[string][]string // schema → the statements that empty it
}{stmts: map[string][]string{}}

// ReusedSchemaURL is SchemaURL for a test whose store holds nothing after its
// cleanups: the schema is a fresh one, or one that another test of this process
// used and emptied (see empty), so the store it opens finds its tables migrated
// and holding only what a fresh store holds. A package that uses it runs its
// tests through Main.
func ReusedSchemaURL(t testing.TB) string {
	t.Helper()
	base := URL(t)
	reuse.mu.Lock()
	var schema string
	if n := len(reuse.free); n > 0 {
		schema, reuse.free = reuse.free[n-1], reuse.free[:n-1]
	} else {
		schema = "t_" + randomHex(8)
		reuse.all = append(reuse.all, schema)
		reuse.base = base
	}
	reuse.mu.Unlock()
	t.Cleanup(func() {
		if err := empty(base, schema); err != nil {
			t.Logf("emptying schema %s for reuse: %v; dropping it", schema, err)
			DropSchema(t, base, schema)
			return
		}
		reuse.mu.Lock()
		reuse.free = append(reuse.free, schema)
		reuse.mu.Unlock()
	})
	return WithSchema(t, base, schema)
}

// empty deletes the rows of every table of schema but schema_migrations,
// restarts its identity columns and writes again the rows that the migrations
// write, in one transaction: the schema is as a fresh store's. (DELETE, not
// TRUNCATE: a truncation gives every table and index a new file: 140 ms, near
// half the schema's creation.) A schema whose store was never opened has no
// tables: nothing to do.
func empty(base, schema string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return withConn(ctx, base, func(conn *pgx.Conn) error { return emptyWith(ctx, conn, schema) })
}

// emptyWith empties schema on conn.
func emptyWith(ctx context.Context, conn *pgx.Conn, schema string) error {
	stmts, err := emptyingStatements(ctx, conn, schema)
	if err != nil || len(stmts) == 0 {
		return err
	}
	batch := &pgx.Batch{}
	for _, st := range stmts {
		batch.Queue(st)
	}
	// The rows the migrations write, by the migrations' own SQL, which names its
	// tables unqualified. The search path is set before the batch is sent: pgx
	// prepares every statement of a batch before it runs the first, so a
	// set_config inside the batch came too late for them (every emptying failed
	// and every test of a suite created its schema again).
	for _, name := range rowMigrations {
		sql, err := pgmigrations.FS.ReadFile(name)
		if err != nil {
			return err
		}
		batch.Queue(string(sql))
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT set_config('search_path', $1, true)`, pgx.Identifier{schema}.Sanitize()); err != nil {
			return err
		}
		return tx.SendBatch(ctx, batch).Close()
	})
}

// emptyingStatements returns the statements that delete the rows of schema's
// tables and restart its identity columns, read from the catalogs the first time
// and kept for the schema's later reuses (tests do not change a store's tables):
// with autovacuum off, as on the test machine, the catalogs of a database whose
// tests create and drop schemas grow and every scan of them slows (this query
// took 130 ms once pg_attribute held a million dead rows). None while the
// schema has no tables (its store was never opened).
func emptyingStatements(ctx context.Context, conn *pgx.Conn, schema string) ([]string, error) {
	reuse.mu.Lock()
	stmts, ok := reuse.stmts[schema]
	reuse.mu.Unlock()
	if ok {
		return stmts, nil
	}
	rows, err := conn.Query(ctx, `SELECT format('DELETE FROM %I.%I', schemaname, tablename) FROM pg_tables
		WHERE schemaname = $1 AND tablename <> 'schema_migrations'
		UNION ALL
		SELECT format('SELECT setval(pg_get_serial_sequence(%L, %L), 1, false)', format('%I.%I', n.nspname, c.relname), a.attname)
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND a.attidentity <> '' AND NOT a.attisdropped`, schema)
	if err != nil {
		return nil, err
	}
	stmts, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(stmts) == 0 {
		return nil, err
	}
	reuse.mu.Lock()
	reuse.stmts[schema] = stmts
	reuse.mu.Unlock()
	return stmts, nil
}

// rowMigrations are the migrations that write rows (the others create tables
// and indexes): empty runs them again after deleting every row.
var rowMigrations = []string{"0017_default_namespace.sql"}

// Main runs a package's tests, then drops the schemas ReusedSchemaURL handed out
// (DropReused) and exits with the tests' code: the TestMain of a package that uses
// ReusedSchemaURL. After tests that passed, each of checks runs (a leak check,
// say); an error it returns is printed and fails the run.
func Main(m *testing.M, checks ...func() error) {
	code := m.Run()
	DropReused()
	for _, check := range checks {
		if code != 0 {
			break
		}
		if err := check(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			code = 1
		}
	}
	os.Exit(code)
}

// DropReused drops every schema ReusedSchemaURL handed out in this process (Main
// calls it after the tests).
func DropReused() {
	reuse.mu.Lock()
	defer reuse.mu.Unlock()
	for _, schema := range reuse.all {
		DropSchema(stderrLogger{}, reuse.base, schema)
	}
	reuse.all, reuse.free = nil, nil
	clear(reuse.stmts)
}

// logger is where DropSchema reports a failure: a test, or stderr.
type logger interface {
	Logf(format string, args ...any)
}

type stderrLogger struct{}

func (stderrLogger) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
