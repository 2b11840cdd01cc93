package trellis_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// TxStep writes to the store's database in the same transaction as the step's
// checkpoint: the row and the step's recorded result commit together, once.
func ExampleTxStep() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	path := filepath.Join(dir, "trellis.db")
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + path})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	app, err := storesqlite.OpenDB(path) // the application's own tables, same file
	if err != nil {
		panic(err)
	}
	defer app.Close()
	if _, err := app.Exec(`CREATE TABLE payments (order_id TEXT PRIMARY KEY, amount INTEGER)`); err != nil {
		panic(err)
	}

	record := trellis.NewWorkflow("record-payment", func(wc *trellis.Context, o Order) (int64, error) {
		return trellis.TxStep(wc, "insert", func(ctx context.Context, tx any) (int64, error) {
			res, err := tx.(*sql.Tx).ExecContext(ctx, `INSERT INTO payments VALUES (?, ?)`, o.ID, o.Amount)
			if err != nil {
				return 0, err
			}
			return res.RowsAffected()
		})
	})
	if err := db.Register(ctx, record); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, record, Order{ID: "order-7", Amount: 990})
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	var amount int
	if err := app.QueryRow(`SELECT amount FROM payments WHERE order_id = 'order-7'`).Scan(&amount); err != nil {
		panic(err)
	}
	fmt.Println(amount)
	// Output:
	// 1 <nil>
	// 990
}

// StartTx starts a run inside the application's own transaction: the order row
// and the run that processes it exist together, or neither does.
func ExampleStartTx() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	path := filepath.Join(dir, "trellis.db")
	db, err := trellis.Open(ctx, trellis.Config{
		Store: "sqlite://" + path,
		// On SQLite a worker learns of a transactional start at its next poll.
		Worker: trellis.WorkerOptions{PollInterval: 20 * time.Millisecond},
	})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	app, err := storesqlite.OpenDB(path)
	if err != nil {
		panic(err)
	}
	defer app.Close()
	if _, err := app.Exec(`CREATE TABLE orders (id TEXT PRIMARY KEY)`); err != nil {
		panic(err)
	}

	ship := trellis.NewWorkflow("ship", func(wc *trellis.Context, id string) (string, error) {
		return "shipped " + id, nil
	})
	if err := db.Register(ctx, ship); err != nil {
		panic(err)
	}

	// Rolled back: neither the row nor the run exists.
	tx, _ := app.BeginTx(ctx, nil)
	tx.ExecContext(ctx, `INSERT INTO orders VALUES ('o-1')`)
	if _, err := trellis.StartTx(ctx, db, tx, ship, "o-1", trellis.StartOptions{ID: "ship-o-1"}); err != nil {
		panic(err)
	}
	tx.Rollback()
	_, err = db.Get(ctx, "ship-o-1")
	fmt.Println("rolled back, run not found:", errors.Is(err, trellis.ErrRunNotFound))

	// Committed: both do.
	tx, _ = app.BeginTx(ctx, nil)
	tx.ExecContext(ctx, `INSERT INTO orders VALUES ('o-2')`)
	h, err := trellis.StartTx(ctx, db, tx, ship, "o-2", trellis.StartOptions{ID: "ship-o-2"})
	if err != nil {
		panic(err)
	}
	if err := tx.Commit(); err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	// Output:
	// rolled back, run not found: true
	// shipped o-2 <nil>
}
