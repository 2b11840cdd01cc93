package storesqlite

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// migration is one numbered schema change.
type migration struct {
	version int
	name    string
	sql     string
}

// migrations returns the embedded migrations in version order.
func migrations() ([]migration, error) {
	files, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	var ms []migration
	for _, f := range files {
		base := strings.TrimSuffix(path.Base(f), ".sql")
		num, name, _ := strings.Cut(base, "_")
		v, err := strconv.Atoi(num)
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("migration %s: name must start with a positive number", f)
		}
		b, err := migrationFS.ReadFile(f)
		if err != nil {
			return nil, err
		}
		ms = append(ms, migration{version: v, name: name, sql: string(b)})
	}
	slices.SortFunc(ms, func(a, b migration) int { return a.version - b.version })
	for i := 1; i < len(ms); i++ {
		if ms[i].version == ms[i-1].version {
			return nil, fmt.Errorf("migration version %d is used twice", ms[i].version)
		}
	}
	return ms, nil
}

const sqlCreateSchemaMigrations = `CREATE TABLE IF NOT EXISTS schema_migrations (
	version    INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL
)`

// Migrate applies the embedded migrations not yet recorded in schema_migrations,
// all in one transaction. It is idempotent; Open calls it.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := migrations()
	if err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	if err := s.write(ctx, func(tx *wtx) error { return migrate(tx, ms) }); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	return nil
}

func migrate(tx *wtx, ms []migration) error {
	if _, err := tx.execRaw(sqlCreateSchemaMigrations); err != nil {
		return fmt.Errorf("creating schema_migrations: %w", err)
	}
	var current int
	row := tx.QueryRowContext(context.Background(), `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`)
	if err := row.Scan(&current); err != nil {
		return fmt.Errorf("reading schema version: %w", err)
	}
	for _, m := range ms {
		if m.version <= current {
			continue
		}
		if _, err := tx.execRaw(m.sql); err != nil {
			return fmt.Errorf("applying migration %04d_%s: %w", m.version, m.name, err)
		}
		if _, err := tx.execRaw(`INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)`,
			m.version, m.name, tx.now.UnixNano()); err != nil {
			return fmt.Errorf("recording migration %04d: %w", m.version, err)
		}
	}
	return nil
}
