package storesqlite

import (
	"context"
	"embed"
	"fmt"

	"github.com/trellis-dev/trellis/internal/migrations"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// embedded returns the embedded migrations in version order.
func embedded() ([]migrations.Migration, error) { return migrations.Load(migrationFS, "migrations") }

// Migrate applies the embedded migrations not yet recorded in schema_migrations,
// all in one transaction. It is idempotent; Open calls it.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := embedded()
	if err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	if err := s.write(ctx, func(tx *wtx) error { return migrate(tx, ms) }); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	return nil
}

// requireMigrated checks, without writing, that the database holds a store with
// every embedded migration (see Config.NoMigrate).
func (s *Store) requireMigrated(ctx context.Context) error {
	ms, err := embedded()
	if err != nil {
		return fmt.Errorf("reading migrations: %w", err)
	}
	var current int
	var found bool
	err = s.readDB.QueryRowContext(ctx, `SELECT EXISTS (SELECT 1 FROM sqlite_master
		WHERE type = 'table' AND name = 'schema_migrations')`).Scan(&found)
	if err == nil && found {
		err = s.readDB.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current)
	}
	if err != nil {
		return fmt.Errorf("reading schema version: %w", err)
	}
	return migrations.RequireCurrent(s.cfg.Path, current, ms)
}

func migrate(tx *wtx, ms []migrations.Migration) error {
	return shared.ApplyMigrations(tx, ms, tx.now, func(sql string) error {
		_, err := tx.execRaw(sql)
		return err
	})
}
