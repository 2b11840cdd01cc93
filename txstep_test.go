package trellis_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// userDB is the application's own access to the store's database, as a test of
// transactional starts and steps needs it on each SQL store.
type userDB struct {
	url string // the store URL
	// exec runs a statement outside any transaction; count reads one integer.
	exec  func(t *testing.T, q string)
	count func(t *testing.T, q string) int
	// begin opens an application transaction.
	begin func(t *testing.T) (tx any, commit func() error, rollback func())
	// insert adds a row (v) to table inside tx, which is a pgx.Tx or a *sql.Tx.
	insert func(ctx context.Context, tx any, table, v string) error
}

func sqliteUserDB(t *testing.T) *userDB {
	u := sqliteURL(t)
	path := strings.TrimPrefix(u, "sqlite://")
	var db *sql.DB
	get := func(t *testing.T) *sql.DB {
		if db == nil {
			var err error
			if db, err = storesqlite.OpenDB(path); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
		}
		return db
	}
	return &userDB{
		url: u,
		exec: func(t *testing.T, q string) {
			if _, err := get(t).Exec(q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		},
		count: func(t *testing.T, q string) (n int) {
			if err := get(t).QueryRow(q).Scan(&n); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			return n
		},
		begin: func(t *testing.T) (any, func() error, func()) {
			tx, err := get(t).Begin()
			if err != nil {
				t.Fatal(err)
			}
			return tx, tx.Commit, func() { _ = tx.Rollback() }
		},
		insert: func(ctx context.Context, tx any, table, v string) error {
			_, err := tx.(*sql.Tx).ExecContext(ctx, "INSERT INTO "+table+" VALUES (?)", v)
			return err
		},
	}
}

func postgresUserDB(t *testing.T) *userDB {
	u := pgtest.SchemaURL(t)
	connStr := pgURLWithSearchPath(t, u)
	var conn *pgx.Conn
	get := func(t *testing.T) *pgx.Conn {
		if conn == nil {
			var err error
			if conn, err = pgx.Connect(context.Background(), connStr); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { conn.Close(context.Background()) })
		}
		return conn
	}
	ctx := context.Background()
	return &userDB{
		url: u,
		exec: func(t *testing.T, q string) {
			if _, err := get(t).Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		},
		count: func(t *testing.T, q string) (n int) {
			if err := get(t).QueryRow(ctx, q).Scan(&n); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
			return n
		},
		begin: func(t *testing.T) (any, func() error, func()) {
			tx, err := get(t).Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return tx, func() error { return tx.Commit(ctx) }, func() { _ = tx.Rollback(ctx) }
		},
		insert: func(ctx context.Context, tx any, table, v string) error {
			_, err := tx.(pgx.Tx).Exec(ctx, "INSERT INTO "+table+" VALUES ($1)", v)
			return err
		},
	}
}

// forEachSQLStore runs test on SQLite and on Postgres.
func forEachSQLStore(t *testing.T, test func(t *testing.T, db *userDB)) {
	for name, newDB := range map[string]func(*testing.T) *userDB{"sqlite": sqliteUserDB, "postgres": postgresUserDB} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			test(t, newDB(t))
		})
	}
}

// A run started in a transaction exists if and only if the transaction commits.
func TestStartTx(t *testing.T) {
	t.Parallel()
	forEachSQLStore(t, func(t *testing.T, db *userDB) {
		wf := trellis.NewWorkflow("tx-start", func(wc *trellis.Context, order string) (string, error) {
			return "shipped " + order, nil
		})
		c := open(t, db.url)
		register(t, c, wf)
		db.exec(t, "CREATE TABLE orders (id TEXT PRIMARY KEY)")
		ctx := ctxT(t)

		tx, _, rollback := db.begin(t)
		if err := db.insert(ctx, tx, "orders", "a"); err != nil {
			t.Fatal(err)
		}
		h := must[*trellis.Handle[string]](t)(trellis.StartTx(ctx, c, tx, wf, "a"))
		rollback()
		if _, err := c.Get(ctx, h.RunID()); !errors.Is(err, trellis.ErrRunNotFound) {
			t.Fatalf("run started in a rolled-back transaction: Get = %v, want ErrRunNotFound", err)
		}

		tx, commit, _ := db.begin(t)
		if err := db.insert(ctx, tx, "orders", "b"); err != nil {
			t.Fatal(err)
		}
		h = must[*trellis.Handle[string]](t)(trellis.StartTx(ctx, c, tx, wf, "b", trellis.StartOptions{ID: "order-b"}))
		_, err := trellis.StartTx(ctx, c, tx, wf, "b", trellis.StartOptions{ID: "order-b"})
		if !errors.Is(err, trellis.ErrRunExists) {
			t.Fatalf("second start of order-b in the transaction: %v, want ErrRunExists", err)
		}
		if err := commit(); err != nil {
			t.Fatalf("commit after a rejected start: %v", err)
		}
		if got := mustResult(t, h); got != "shipped b" {
			t.Fatalf("result %q", got)
		}
		if n := db.count(t, "SELECT count(*) FROM orders"); n != 1 {
			t.Fatalf("%d orders, want 1", n)
		}
		if _, err := trellis.StartTx(ctx, c, "not a transaction", wf, "c"); !errors.Is(err, store.ErrInvalidParams) {
			t.Fatalf("StartTx with a wrong tx type: %v, want ErrInvalidParams", err)
		}
	})
}

// A transactional step's writes commit with its checkpoint: a failed attempt's
// writes roll back, and a replay after a hand-over does not run it again.
func TestTxStepExactlyOnce(t *testing.T) {
	t.Parallel()
	forEachSQLStore(t, func(t *testing.T, db *userDB) {
		var attempts atomic.Int32
		var block atomic.Bool
		block.Store(true)
		blocked := make(chan struct{})
		wf := trellis.NewWorkflow("tx-step", func(wc *trellis.Context, order string) (string, error) {
			n, err := trellis.TxStep(wc, "charge", func(ctx context.Context, tx any) (int, error) {
				if err := db.insert(ctx, tx, "charges", order); err != nil {
					return 0, err
				}
				if attempts.Add(1) == 1 {
					return 0, errBoom // rolled back with the row
				}
				return 7, nil
			})
			if err != nil {
				return "", err
			}
			return trellis.Step(wc, "ship", func(ctx context.Context) (string, error) {
				if block.Load() {
					close(blocked)
					<-ctx.Done() // the worker is shutting down
					return "", ctx.Err()
				}
				return order + " charged " + string(rune('0'+n)), nil
			})
		})
		c1, err := trellis.Open(context.Background(), trellis.Config{Store: db.url, Worker: trellis.WorkerOptions{
			ShutdownGrace: 50 * time.Millisecond, MaxInlineBackoff: 20 * time.Millisecond}})
		if err != nil {
			t.Fatal(err)
		}
		db.exec(t, "CREATE TABLE charges (id TEXT)")
		register(t, c1, wf)
		h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c1, wf, "o1", trellis.StartOptions{}))
		<-blocked
		if err := c1.Close(); err != nil {
			t.Fatal(err)
		}
		block.Store(false)
		c2 := open(t, db.url)
		register(t, c2, wf)
		if got := mustResult(t, must[*trellis.Handle[string]](t)(trellis.GetHandle(ctxT(t), c2, wf, h.RunID()))); got != "o1 charged 7" {
			t.Fatalf("result %q", got)
		}
		if n := db.count(t, "SELECT count(*) FROM charges"); n != 1 || attempts.Load() != 2 {
			t.Fatalf("%d charges after %d attempts, want 1 after 2", n, attempts.Load())
		}
	})
}

// A transactional checkpoint with a stale lease commits nothing, not even the
// step's own writes.
func TestCheckpointTxStaleLease(t *testing.T) {
	t.Parallel()
	forEachSQLStore(t, func(t *testing.T, db *userDB) {
		c := open(t, db.url, func(c *trellis.Config) { c.Worker.Disabled = true })
		db.exec(t, "CREATE TABLE charges (id TEXT)")
		wf := trellis.NewWorkflow("tx-stale", func(wc *trellis.Context, _ int) (int, error) { return 0, nil })
		register(t, c, wf)
		h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 0))
		st := openStore(t, db.url)
		claimed := must[*store.RunsClaimResult](t)(st.RunsClaim(ctxT(t), &store.RunsClaimParams{
			Namespace: "default", Workflows: []string{"tx-stale"}, Worker: "w", Max: 1, LeaseDuration: time.Minute}))
		if len(claimed.Runs) != 1 {
			t.Fatal("claim failed")
		}
		lease := store.Lease{Namespace: "default", RunID: h.RunID(), Token: claimed.Runs[0].LeaseToken}
		txc := st.(store.TxCheckpointer)
		for _, tc := range []struct {
			token int64
			want  error
		}{{lease.Token + 1, store.ErrLeaseLost}, {lease.Token, nil}} {
			l := lease
			l.Token = tc.token
			_, err := txc.CheckpointTx(ctxT(t), &store.CheckpointParams{Lease: l, Status: store.StatusRunning},
				func(ctx context.Context, tx any) error { return db.insert(ctx, tx, "charges", "x") })
			if !errors.Is(err, tc.want) {
				t.Fatalf("CheckpointTx with token %d: %v, want %v", tc.token, err, tc.want)
			}
		}
		if n := db.count(t, "SELECT count(*) FROM charges"); n != 1 {
			t.Fatalf("%d charges, want 1 (the stale checkpoint's must roll back)", n)
		}
	})
}
