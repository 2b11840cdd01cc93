// Package pgstore opens Postgres stores for tests and benchmarks, on the schemas
// of package pgtest. (pgtest cannot open them itself: storepg's own internal
// tests import it.)
package pgstore

import (
	"context"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/store/storepg"
)

// Open opens a store on url (a pgtest schema URL) with clock now (nil: the real
// clock), closed when t ends.
func Open(t testing.TB, url string, now func() time.Time) *storepg.Store {
	t.Helper()
	cfg, err := storepg.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Now = now
	s, err := storepg.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// OpenReused is Open on a schema of pgtest.ReusedSchemaURL: the store is closed,
// then its tables emptied for the next test (the package's TestMain is
// pgtest.Main).
func OpenReused(t testing.TB, now func() time.Time) *storepg.Store {
	t.Helper()
	return Open(t, pgtest.ReusedSchemaURL(t), now)
}
