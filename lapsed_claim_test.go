package trellis_test

import (
	"context"
	neturl "net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// A start whose run is created claimed for this client's worker (it has a free
// slot) bounds the store's write by the worker's lease. A store slower than that
// (here its writes are held by another connection for several leases) used to
// fail the start with "context deadline exceeded", though the caller set no
// deadline. The start is now finished unclaimed: it returns the run, which runs
// once. The same for a batch start.
func TestStartOutlastingItsClaim(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	var calls atomic.Int32
	wf := trellis.NewWorkflow("lapsed-claim", func(wc *trellis.Context, in string) (string, error) {
		return trellis.Step(wc, "once", func(context.Context) (string, error) { calls.Add(1); return in, nil })
	})
	c := open(t, url, func(cfg *trellis.Config) { cfg.Worker.LeaseDuration = 300 * time.Millisecond })
	register(t, c, wf)
	ctx := ctxT(t)

	release := holdWrites(t, url)
	time.AfterFunc(1500*time.Millisecond, release)
	h, err := trellis.Start(ctx, c, wf, "one", trellis.StartOptions{})
	if err != nil {
		t.Fatalf("a start that outlasted its claim: %v", err)
	}
	if out := mustResult(t, h); out != "one" {
		t.Fatalf("output %q", out)
	}

	release = holdWrites(t, url)
	time.AfterFunc(1500*time.Millisecond, release)
	res, err := c.StartMany(ctx, []trellis.StartRequest{
		{Workflow: "lapsed-claim", Input: []byte(`"two"`)}, {Workflow: "lapsed-claim", Input: []byte(`"three"`)}})
	if err != nil {
		t.Fatalf("a batch start that outlasted its claims: %v", err)
	}
	for i, r := range res {
		if r.Error != nil || r.Run == nil || !r.Created {
			t.Fatalf("item %d: %+v", i, r)
		}
		if run := waitStatus(t, c, r.Run.ID, trellis.StatusSucceeded); run.ID != r.Run.ID {
			t.Fatalf("item %d: run %s, want %s", i, run.ID, r.Run.ID)
		}
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("the steps ran %d times, want 3 (once a run)", n)
	}
}

// holdWrites blocks every write to the store at url (another connection takes
// the write lock: SQLite's, or an EXCLUSIVE lock of the runs table, which lets
// reads through) until release is called.
func holdWrites(t *testing.T, url string) (release func()) {
	t.Helper()
	ctx := context.Background()
	done := make(chan struct{})
	var once atomic.Bool
	release = func() {
		if once.CompareAndSwap(false, true) {
			close(done)
		}
	}
	t.Cleanup(release)
	held := make(chan error, 1)
	if os.Getenv(envTestStore) == "postgres" {
		conn, err := pgx.Connect(ctx, pgURLWithSearchPath(t, url))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer conn.Close(ctx)
			tx, err := conn.Begin(ctx)
			if err == nil {
				_, err = tx.Exec(ctx, "LOCK TABLE runs IN EXCLUSIVE MODE")
			}
			held <- err
			<-done
			if tx != nil {
				tx.Rollback(ctx)
			}
		}()
	} else {
		db, err := storesqlite.OpenDB(sqlitePath(t, url))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			defer db.Close()
			conn, err := db.Conn(ctx)
			if err == nil {
				defer conn.Close()
				_, err = conn.ExecContext(ctx, "BEGIN IMMEDIATE")
			}
			held <- err
			<-done
			if err == nil {
				conn.ExecContext(ctx, "ROLLBACK")
			}
		}()
	}
	if err := <-held; err != nil {
		t.Fatalf("holding the store's writes: %v", err)
	}
	return release
}

// sqlitePath is the database file of the SQLite store URL u.
func sqlitePath(t *testing.T, u string) string {
	t.Helper()
	cfg, err := storesqlite.ParseURL(u)
	if err != nil {
		t.Fatal(err)
	}
	return cfg.Path
}

// pgURLWithSearchPath is the Postgres store URL u (its schema in the query)
// as a connection string whose search path is that schema.
func pgURLWithSearchPath(t *testing.T, u string) string {
	t.Helper()
	parsed, err := neturl.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	q := parsed.Query()
	q.Set("search_path", q.Get("schema"))
	q.Del("schema")
	parsed.RawQuery = q.Encode()
	return parsed.String()
}
