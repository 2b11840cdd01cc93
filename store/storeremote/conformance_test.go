package storeremote_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/internal/pgtest/pgstore"
	"github.com/trellis-dev/trellis/internal/protocol"
	"github.com/trellis-dev/trellis/internal/secrets"
	"github.com/trellis-dev/trellis/server"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storeremote"
	"github.com/trellis-dev/trellis/store/storesqlite"
	"github.com/trellis-dev/trellis/store/storetest"
)

// serve starts a real listening server on backend (insecure, loopback) and
// returns a remote worker client of it; both stop at cleanup.
func serve(t *testing.T, backend store.Store, namespace string) *storeremote.Store {
	t.Helper()
	srv, err := server.New(context.Background(), server.Config{Backend: backend, Listen: "127.0.0.1:0", Insecure: true,
		// No background work of its own on the shared store: its scheduler
		// would take the lease the schedule cases acquire, its purger delete
		// the runs the retention cases count.
		IdempotencyPurgeInterval: -1, RetentionInterval: -1, Scheduler: server.SchedulerConfig{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	rs, err := storeremote.New(storeremote.Config{URL: "http://" + srv.Addr().String(), Namespace: namespace})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		rs.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("server shutdown: %v", err)
		}
	})
	return rs
}

// The conformance suite with every worker-role call made by the remote client
// through a server on SQLite; setup and the other roles use the server's store.
func TestConformanceSQLite(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		s, err := storesqlite.Open(context.Background(), storesqlite.Config{Path: filepath.Join(t.TempDir(), "t.db"), Now: now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return handed(t, s, serve(t, s, "ns"))
	})
}

// handed is the backend with its worker role played by the remote client,
// the runs the backend creates claimed handed to it with their lease secrets,
// as the server hands runs to waiting workers.
func handed(t *testing.T, backend store.Store, rs *storeremote.Store) store.Store {
	keys, err := secrets.Load(t.Context(), backend)
	if err != nil {
		t.Fatal(err)
	}
	return storetest.WithHandedWorker(backend, rs, keys.Leases().SignClaimed)
}

// TestMain runs the package's tests with the servers' protocol checks off: the
// storage contract's suite writes checkpoints no worker makes (bare ops, waits
// without a wake, run-store writes without their ops) to test what the store
// does with them, and this package tests that the worker protocol carries the
// contract whole. What a server lets a worker write is tested in server and
// internal/protocol.
func TestMain(m *testing.M) {
	protocol.SkipChecksForTests()
	pgtest.Main(m)
}

// The same through a server on Postgres.
func TestConformancePostgres(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		s := pgstore.OpenReused(t, now)
		return handed(t, s, serve(t, s, "ns"))
	})
}
