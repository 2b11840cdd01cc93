// Package pgtest gives tests a PostgreSQL database: the server named by the
// environment variable TRELLIS_TEST_POSTGRES (default DefaultURL), and a fresh schema
// per test so tests run in parallel without seeing each other's rows.
//
// When the server is unreachable a test is skipped with a message saying how to point
// it at one, except under CI (CI=true), where it fails: CI must run these tests.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvURL names the environment variable holding the test server's URL.
const EnvURL = "TRELLIS_TEST_POSTGRES"

// DefaultURL is the test server used when EnvURL is unset: the local cluster with
// trust authentication.
const DefaultURL = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"

var (
	probeOnce sync.Once
	probeErr  error
)

// URL returns the base URL of the test server (without a schema), after checking
// once per process that it answers. It skips t (fails it under CI=true) otherwise.
func URL(t testing.TB) string {
	t.Helper()
	u := os.Getenv(EnvURL)
	if u == "" {
		u = DefaultURL
	}
	probeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, u)
		if err != nil {
			probeErr = err
			return
		}
		probeErr = conn.Ping(ctx)
		_ = conn.Close(ctx)
	})
	if probeErr != nil {
		msg := "PostgreSQL at " + redact(u) + " is unreachable (" + probeErr.Error() +
			"); set " + EnvURL + " to a server's URL to run the Postgres tests"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return u
}

// SchemaURL returns a store URL (postgres://...?schema=NAME) on a fresh, unique
// schema of the test server, dropped when the test ends.
func SchemaURL(t testing.TB) string {
	t.Helper()
	base := URL(t)
	schema := "t_" + randomHex(8)
	t.Cleanup(func() { DropSchema(t, base, schema) })
	return WithSchema(t, base, schema)
}

// WithSchema returns base with its schema parameter set to schema.
func WithSchema(t testing.TB, base, schema string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatalf("parsing %s: %v", EnvURL, err)
	}
	q := u.Query()
	q.Set("schema", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// DropSchema drops schema and everything in it; failures are logged, not fatal.
func DropSchema(t logger, base, schema string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := withConn(ctx, base, func(conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		return err
	})
	if err != nil {
		t.Logf("dropping schema %s: %v", schema, err)
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func redact(u string) string {
	p, err := url.Parse(u)
	if err != nil {
		return "(malformed URL)"
	}
	return p.Redacted()
}

// Ping connects to url and pings the server.
func Ping(ctx context.Context, url string) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.Ping(ctx)
}
