package server

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/internal/sqlitedrv"
)

// /readyz is evaluated on each request: while the store's schema records a
// version behind the binary's migrations (as after a rollback of the schema,
// or a store another binary migrated), it answers 503 unavailable, and /healthz
// still 200; once the schema is current again, 200. The route needs no token,
// so its answer names no file or schema: the server's log says what is wrong.
func TestReadyzSchemaBehind(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			u := url(t)
			var logs lockedBuffer
			e := newEnv(t, u, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
			e.do("GET", "/readyz", "", nil).want(t, 200)
			exec := schemaExec(t, u)
			// The latest migration's record is hidden (negated, to be put back):
			// the schema now reads as one version behind.
			exec("UPDATE %s SET version = -version WHERE version = (SELECT MAX(version) FROM %s)")
			p := e.do("GET", "/readyz", "", nil).problem(t, 503, "unavailable")
			if strings.Contains(p.Detail, "schema") || strings.Contains(p.Detail, "trellis.db") {
				t.Errorf("readyz detail %q, to anyone without a token, tells of the store", p.Detail)
			}
			if l := logs.String(); !strings.Contains(l, "schema version") || !strings.Contains(l, "trellis migrate") {
				t.Errorf("the log does not say the schema is behind: %s", l)
			}
			e.do("GET", "/healthz", "", nil).want(t, 200)
			exec("UPDATE %s SET version = -version WHERE version < 0")
			e.do("GET", "/readyz", "", nil).want(t, 200)
		})
	}
}

// schemaExec returns a function that runs a statement on the store at u through a
// connection of its own, with each %s replaced by the store's schema_migrations
// table.
func schemaExec(t *testing.T, u string) func(stmt string) {
	t.Helper()
	if path, ok := strings.CutPrefix(u, "sqlite://"); ok {
		db, err := sqlitedrv.Open(path + "?_pragma=busy_timeout(10000)")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return func(stmt string) {
			t.Helper()
			if _, err := db.Exec(strings.ReplaceAll(stmt, "%s", "schema_migrations")); err != nil {
				t.Fatal(err)
			}
		}
	}
	parsed, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	table := pgx.Identifier{parsed.Query().Get("schema"), "schema_migrations"}.Sanitize()
	conn, err := pgx.Connect(context.Background(), pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return func(stmt string) {
		t.Helper()
		if _, err := conn.Exec(context.Background(), strings.ReplaceAll(stmt, "%s", table)); err != nil {
			t.Fatal(err)
		}
	}
}
