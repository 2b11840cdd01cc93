package storepg

import (
	"context"
	"fmt"
	"hash/fnv"

	"github.com/jackc/pgx/v5"
	"github.com/trellis-dev/trellis/internal/migrations"
	pgmigrations "github.com/trellis-dev/trellis/store/storepg/migrations"
)

// embedded returns the embedded migrations in version order.
func embedded() ([]migrations.Migration, error) { return migrations.Load(pgmigrations.FS, ".") }

// migrationLockKey is the advisory lock key that serialises migrations of a schema.
func migrationLockKey(schema string) int64 {
	h := fnv.New64a()
	h.Write([]byte("trellis/migrate/" + schema))
	return int64(h.Sum64())
}

// Migrate creates the schema if missing and applies the embedded migrations not yet
// recorded in its schema_migrations table, in one transaction. Concurrent callers (of
// any process) serialise on an advisory lock: one migrates, the others wait and then
// find nothing to do. Open calls it.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := embedded()
	if err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error { return migrate(ctx, tx, s.cfg.Schema, ms, s) })
	if err != nil {
		// After Close, the pool's "closed pool" is store.ErrClosed, as for every
		// other call (storetest Lifecycle).
		return fmt.Errorf("migrating schema %s: %w", s.cfg.Schema, s.readErr(err))
	}
	return nil
}

// requireMigrated checks, without writing, that the schema holds a store with
// every embedded migration (see Config.NoMigrate).
func (s *Store) requireMigrated(ctx context.Context) error {
	ms, err := embedded()
	if err != nil {
		return fmt.Errorf("reading migrations: %w", err)
	}
	table := pgx.Identifier{s.cfg.Schema, "schema_migrations"}.Sanitize()
	var current int
	var found bool
	err = s.pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&found)
	if err == nil && found {
		err = s.pool.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM `+table).Scan(&current)
	}
	if err != nil {
		return fmt.Errorf("reading schema version: %w", err)
	}
	return migrations.RequireCurrent("schema "+s.cfg.Schema, current, ms)
}

func migrate(ctx context.Context, tx pgx.Tx, schema string, ms []migrations.Migration, s *Store) error {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, migrationLockKey(schema)); err != nil {
		return fmt.Errorf("taking the migration lock: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("creating schema: %w", err)
	}
	// The connection's search_path names the schema, but it may not have existed
	// when the connection was made.
	if _, err := tx.Exec(ctx, `SET LOCAL search_path TO `+pgx.Identifier{schema}.Sanitize()); err != nil {
		return fmt.Errorf("setting search_path: %w", err)
	}
	return shared.ApplyMigrations(querier{ctx: ctx, c: tx}, ms, s.now(), func(sql string) error {
		// The simple protocol runs a file of several statements.
		_, err := tx.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol)
		return err
	})
}
