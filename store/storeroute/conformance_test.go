package storeroute_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/internal/pgtest/pgstore"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storeroute"
	"github.com/trellis-dev/trellis/store/storesqlite"
	"github.com/trellis-dev/trellis/store/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// openSQLite opens a fresh SQLite store in t's directory, closed when t ends.
func openSQLite(t testing.TB, name string, now func() time.Time) *storesqlite.Store {
	t.Helper()
	s, err := storesqlite.Open(context.Background(), storesqlite.Config{Path: filepath.Join(t.TempDir(), name), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// route builds a router, closed when t ends (its stores' own cleanups close
// them again: Close is idempotent).
func route(t testing.TB, control store.Store, routes map[string]store.Store) store.Store {
	t.Helper()
	r, err := storeroute.New(control, routes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// perStore are the cases of the suite that check what a router keeps within
// each store only (the package doc, "What a router cannot keep"), with why:
// they are skipped when the suite's namespaces ("ns" and "other") are in two
// stores.
var perStore = map[string]string{
	"Create/SequenceIncreases": "Run.Sequence increases within a store: the runs of ns and other are in two",
}

// skipPerStore skips t when it is one of perStore. newStore runs on the
// case's own goroutine, so a skip there ends the case.
func skipPerStore(t *testing.T) {
	for name, why := range perStore {
		if strings.HasSuffix(t.Name(), "/"+name) {
			t.Skip(why)
		}
	}
}

// TestConformanceSQLite runs the suite over a router whose control store and
// the suite's two namespaces ("ns" and "other") are three SQLite files: every
// case that looks across namespaces reads two stores, and neither namespace is
// in the control store. (A namespace kept in the control store beside a routed
// one is TestConformancePostgres's layout.) One run of the suite, not one per
// namespace routed: each costs about 20 s of CPU in CI.
func TestConformanceSQLite(t *testing.T) {
	skipUnderRace(t)
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		skipPerStore(t)
		return route(t, openSQLite(t, "control.db", now), map[string]store.Store{
			"ns": openSQLite(t, "ns.db", now), "other": openSQLite(t, "other.db", now)})
	})
}

// TestConformancePostgres routes the suite's main namespace to a Postgres
// store, the control store being SQLite.
func TestConformancePostgres(t *testing.T) {
	skipUnderRace(t)
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		skipPerStore(t)
		return route(t, openSQLite(t, "control.db", now), map[string]store.Store{"ns": pgstore.OpenReused(t, now)})
	})
}

// skipUnderRace skips the runs of the whole suite under the race detector:
// CI runs them in its run without the detector, which is many times faster
// (the router's own goroutines are raced by the unit tests).
func skipUnderRace(t *testing.T) {
	if raceEnabled {
		t.Skip("the whole suite again, under the race detector")
	}
}
