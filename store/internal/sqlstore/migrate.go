package sqlstore

import (
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/internal/migrations"
)

// ApplyMigrations applies, in q's transaction, the migrations of ms (in version
// order) newer than the last one schema_migrations records, and records each at
// now. script runs SQL that may hold several statements: the dialect's
// SchemaMigrations and the migrations' files.
func (s *SQL) ApplyMigrations(q Querier, ms []migrations.Migration, now time.Time, script func(sql string) error) error {
	if err := script(s.d.SchemaMigrations); err != nil {
		return fmt.Errorf("creating schema_migrations: %w", err)
	}
	var current int
	if err := q.QueryRow(`SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&current); err != nil {
		return fmt.Errorf("reading schema version: %w", err)
	}
	for _, m := range ms {
		if m.Version <= current {
			continue
		}
		if err := script(m.SQL); err != nil {
			return fmt.Errorf("applying migration %04d_%s: %w", m.Version, m.Name, err)
		}
		if _, err := q.Exec(s.q.migrationRecord, m.Version, m.Name, s.d.Time(now)); err != nil {
			return fmt.Errorf("recording migration %04d: %w", m.Version, err)
		}
	}
	return nil
}
