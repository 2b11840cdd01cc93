package sqlstore

import (
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/internal/migrations"
)

// ApplyMigrations applies, in q's transaction, the migrations of ms (in version
// order) that schema_migrations does not record, and records each at now. A
// migration numbered below the newest one applied (two lines of development that
// each added one) is applied too, not skipped. script runs SQL that may hold
// several statements: the dialect's SchemaMigrations and the migrations' files.
func (s *SQL) ApplyMigrations(q Querier, ms []migrations.Migration, now time.Time, script func(sql string) error) error {
	if err := script(s.d.SchemaMigrations); err != nil {
		return fmt.Errorf("creating schema_migrations: %w", err)
	}
	applied := map[int]bool{}
	err := q.Query(`SELECT version FROM schema_migrations`, nil, func(row Scanner) error {
		var v int
		if err := row.Scan(&v); err != nil {
			return err
		}
		applied[v] = true
		return nil
	})
	if err != nil {
		return fmt.Errorf("reading schema version: %w", err)
	}
	for _, m := range ms {
		if applied[m.Version] {
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
