package storesqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

func TestReopenKeepsData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, cfg := setup(t)
	createRun(t, s, "r1")
	cr := claimAll(t, s, 1)[0]
	_, err := s.Checkpoint(ctx, &store.CheckpointParams{
		Lease:  store.Lease{Namespace: "ns", RunID: "r1", Token: cr.LeaseToken},
		Ops:    []*store.Op{{Position: 0, Kind: store.OpStep, Name: "a", Done: true, Result: []byte(`1`)}},
		KV:     []store.KVWrite{{Key: "k", Value: []byte("v")}},
		Status: store.StatusSucceeded, Output: []byte(`"done"`),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, err := storesqlite.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	r, err := s2.RunGet(ctx, &store.RunGetParams{Namespace: "ns", Ref: "r1"})
	if err != nil || r.Status != store.StatusSucceeded || string(r.Output) != `"done"` || r.FinishedAt == nil {
		t.Fatalf("after reopen: %+v, %v", r, err)
	}
	if v, err := s2.KVGet(ctx, &store.KVGetParams{Namespace: "ns", Ref: "r1", Key: "k"}); err != nil || string(v) != "v" {
		t.Fatalf("KVGet after reopen = %q, %v", v, err)
	}
	// Sequences keep growing after a reopen.
	if r2 := createRun(t, s2, "r2"); r2.Sequence <= r.Sequence {
		t.Fatalf("sequence after reopen = %d, want > %d", r2.Sequence, r.Sequence)
	}
}

func TestMigrateIdempotent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, cfg := setup(t)
	for range 2 {
		if err := s.Migrate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s2, err := storesqlite.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	s2.Close()
	db, err := storesqlite.OpenDB(cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n, maxV int
	if err := db.QueryRow(`SELECT COUNT(*), MAX(version) FROM schema_migrations`).Scan(&n, &maxV); err != nil {
		t.Fatal(err)
	}
	// One row per migration file (versions may have gaps while branches that add
	// migrations are merged).
	files, err := filepath.Glob(filepath.Join("migrations", "*.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if n != len(files) || n < 1 {
		t.Fatalf("schema_migrations has %d rows up to version %d, want one per migration (%d)", n, maxV, len(files))
	}
}

// TestMigrationBelowNewestApplied: a migration numbered below the newest one a store
// has (two lines of development that each added one) is applied when the store
// opens, not skipped.
func TestMigrationBelowNewestApplied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cfg, err := storesqlite.ParseURL("sqlite://" + filepath.Join(t.TempDir(), "m.db"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := storesqlite.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db, err := storesqlite.OpenDB(cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// As if migration 3 had come later than the newest one.
	if _, err := db.Exec(`DROP TABLE workers; DELETE FROM schema_migrations WHERE version = 3`); err != nil {
		t.Fatal(err)
	}
	s, err = storesqlite.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	s.Close()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM schema_migrations WHERE version = 3`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("migration 3 recorded %d times (%v), want once", n, err)
	}
	if _, err := db.Exec(`SELECT COUNT(*) FROM workers`); err != nil {
		t.Fatalf("migration 3 was not applied: %v", err)
	}
}

func TestGroupCommitBatches(t *testing.T) {
	t.Parallel()
	s, _, _ := setup(t)
	before := s.Stats()
	const n = 200
	var wg sync.WaitGroup
	errs := make(chan error, n)
	// The requests start together, so that they wait for the writer together.
	// (Started as spawned, on a loaded machine they trickled in: CI saw 200 in
	// 62 transactions once.)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			_, err := s.RunCreate(context.Background(), &store.RunCreateParams{
				Namespace: "ns", ID: fmt.Sprint("r", i), WorkflowID: fmt.Sprint("wf", i),
				Workflow: "w", Queue: "q",
			})
			errs <- err
		})
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	st := s.Stats()
	txs, reqs := st.Transactions-before.Transactions, st.Requests-before.Requests
	if reqs != n || txs > n/2 {
		t.Fatalf("%d requests in %d transactions, want %d requests in far fewer transactions", reqs, txs, n)
	}
	t.Logf("%d requests in %d transactions", reqs, txs)
}

func TestTimesAreUTCNanoseconds(t *testing.T) {
	t.Parallel()
	loc := time.FixedZone("X", 3*3600)
	s, clk, _ := setup(t)
	at := time.Date(2031, 5, 6, 7, 8, 9, 123456789, loc)
	res, err := s.RunCreate(context.Background(), &store.RunCreateParams{
		Namespace: "ns", ID: "r1", WorkflowID: "wf1", Workflow: "w", Queue: "q",
		AvailableAt: &at, Deadline: &at,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Run
	if r.AvailableAt != at.UTC() || *r.Deadline != at.UTC() || r.CreatedAt != clk.Now().UTC() {
		t.Fatalf("times = %v %v %v, want exact UTC values", r.AvailableAt, *r.Deadline, r.CreatedAt)
	}
}

// TestOpenDBSharesTheStoresFile opens the file of an open store with OpenDB, as
// an application does for its own tables: it reads the store's runs, waits for
// locks as the store does, and a transaction of it holds both the application's
// writes and a run the store starts in it (a transactional start).
func TestOpenDBSharesTheStoresFile(t *testing.T) {
	ctx := t.Context()
	s, _, cfg := setup(t)
	createRun(t, s, "r1")
	db, err := storesqlite.OpenDB(cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	var n, timeout int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM runs WHERE id = 'r1'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("runs with id r1: %d, %v; want 1", n, err)
	}
	if err := db.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&timeout); err != nil || timeout != 10000 {
		t.Fatalf("busy_timeout %d, %v; want 10000", timeout, err)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY)`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunCreateTx(ctx, tx, &store.RunCreateParams{Namespace: "default", ID: "r2", WorkflowID: "r2", Workflow: "wf", Queue: "default"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: "r2"}); err != nil {
		t.Fatalf("the run started in the application's transaction: %v", err)
	}
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the application's table after the commit: %d rows, %v", n, err)
	}
	if _, err := storesqlite.OpenDB(filepath.Join(t.TempDir(), "missing", "x.db")); err != nil {
		t.Fatalf("OpenDB is lazy, as sql.Open: %v", err)
	}
}

// TestWriterPageCacheIsBounded: the write connection's page cache is the
// store's bound (cache_size in KiB, negative) and the bound stays small. The
// cache keeps every page the writer touched until the connection closes, so a
// larger one is memory the process holds for runs that merely wait: at 64 MiB,
// 100,000 runs sleeping an hour grew the process by 128 MB (docs/benchmarks.md, w4).
func TestWriterPageCacheIsBounded(t *testing.T) {
	s, _, _ := setup(t)
	createRun(t, s, "r1")
	if got, want := storesqlite.WriterCacheSize(t, s), -storesqlite.WriterCacheKiB; got != want {
		t.Fatalf("writer cache_size %d; want %d", got, want)
	}
	if storesqlite.WriterCacheKiB > 4<<10 {
		t.Fatalf("writer page cache %d KiB; at most 4 MiB (about 9 MB resident in the default build)", storesqlite.WriterCacheKiB)
	}
}
