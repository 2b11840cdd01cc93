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

func migrate(tx *wtx, ms []migrations.Migration) error {
	return shared.ApplyMigrations(tx, ms, tx.now, func(sql string) error {
		_, err := tx.execRaw(sql)
		return err
	})
}
