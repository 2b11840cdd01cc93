package sqlstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/trellis-dev/trellis/store/blobs"
)

// Payloads stored apart (package store/blobs, migration 0027): in the table
// blobs of the store itself (TableBlobs, the default), or in an object store
// whose runs with payloads the table blob_owners names (TrackedBlobs), so that
// a run's deletion can find its objects. deleteRuns deletes a run's rows of
// blobs and marks its row of blob_owners gone in the transaction that deletes
// the run; CollectBlobs deletes the objects of the runs marked gone.

// Writer runs fn in a write transaction of a driver; Reader on its read pool.
type (
	Writer func(ctx context.Context, fn func(tx Tx) error) error
	Reader func(ctx context.Context, fn func(q Querier) error) error
)

// TableBlobs is the blobs.Backend of a SQL store: its table blobs.
type TableBlobs struct {
	SQL   *SQL
	Write Writer
	Read  Reader
}

// Put implements blobs.Backend: one transaction of its own.
func (b *TableBlobs) Put(ctx context.Context, namespace, runID, key string, data []byte) error {
	q := b.SQL.d.rebind(`INSERT INTO blobs (namespace, run_id, key, data) VALUES ($1, $2, $3, $4)
	ON CONFLICT (namespace, run_id, key) DO NOTHING`)
	return b.Write(ctx, func(tx Tx) error {
		_, err := tx.Exec(q, namespace, runID, key, data)
		return err
	})
}

// Get implements blobs.Backend.
func (b *TableBlobs) Get(ctx context.Context, namespace, runID, key string) ([]byte, error) {
	q := b.SQL.d.rebind(`SELECT data FROM blobs WHERE namespace = $1 AND run_id = $2 AND key = $3`)
	var data []byte
	err := b.Read(ctx, func(qr Querier) error {
		return qr.QueryRow(q, namespace, runID, key).Scan(&data)
	})
	if errors.Is(err, ErrNoRows) {
		return nil, fmt.Errorf("%w: run %s, key %s", blobs.ErrNotFound, runID, key)
	}
	if data == nil && err == nil {
		data = []byte{}
	}
	return data, err
}

// DeleteRuns implements blobs.Backend (deleteRuns does it in the run's own
// transaction; this is for a caller that deletes payloads alone).
func (b *TableBlobs) DeleteRuns(ctx context.Context, namespace string, runIDs []string) error {
	q := b.SQL.d.rebind(`DELETE FROM blobs WHERE namespace = $1 AND run_id = $2`)
	return b.Write(ctx, func(tx Tx) error {
		for _, id := range runIDs {
			if _, err := tx.Exec(q, namespace, id); err != nil {
				return err
			}
		}
		return nil
	})
}

// Close implements blobs.Backend: the store closes its own connections.
func (b *TableBlobs) Close() error { return nil }

// TrackedBlobs is an object store's backend that records, before it writes a
// run's first object, that the run has objects (blob_owners), so that the
// run's deletion leaves a mark for CollectBlobs.
type TrackedBlobs struct {
	blobs.Backend
	SQL   *SQL
	Write Writer
	Read  Reader
}

// Put implements blobs.Backend: the owner's row, then the object.
func (b *TrackedBlobs) Put(ctx context.Context, namespace, runID, key string, data []byte) error {
	q := b.SQL.d.rebind(`INSERT INTO blob_owners (namespace, run_id) VALUES ($1, $2)
	ON CONFLICT (namespace, run_id) DO NOTHING`)
	if err := b.Write(ctx, func(tx Tx) error {
		_, err := tx.Exec(q, namespace, runID)
		return err
	}); err != nil {
		return fmt.Errorf("recording the payload's run: %w", err)
	}
	return b.Backend.Put(ctx, namespace, runID, key, data)
}

// Collect deletes the objects of up to limit runs deleted since, and their
// marks; it returns how many runs' objects it deleted.
func (b *TrackedBlobs) Collect(ctx context.Context, limit int) (int, error) {
	type owner struct{ ns, id string }
	var gone []owner
	q := b.SQL.d.rebind(`SELECT namespace, run_id FROM blob_owners WHERE gone LIMIT $1`)
	if b.SQL.d.Param(1) != "$1" {
		q = b.SQL.d.rebind(`SELECT namespace, run_id FROM blob_owners WHERE gone = 1 LIMIT $1`)
	}
	if err := b.Read(ctx, func(qr Querier) error {
		return qr.Query(q, []any{limit}, func(row Scanner) error {
			var o owner
			if err := row.Scan(&o.ns, &o.id); err != nil {
				return err
			}
			gone = append(gone, o)
			return nil
		})
	}); err != nil {
		return 0, fmt.Errorf("listing deleted runs' payloads: %w", err)
	}
	del := b.SQL.d.rebind(`DELETE FROM blob_owners WHERE namespace = $1 AND run_id = $2`)
	for i, o := range gone {
		if err := b.Backend.DeleteRuns(ctx, o.ns, []string{o.id}); err != nil {
			return i, fmt.Errorf("deleting the payloads of run %s: %w", o.id, err)
		}
		if err := b.Write(ctx, func(tx Tx) error {
			_, err := tx.Exec(del, o.ns, o.id)
			return err
		}); err != nil {
			return i, err
		}
	}
	return len(gone), nil
}

// deleteRunBlobs deletes the payloads in the table of the runs of list (a
// parenthesized list of sequences) and marks those in an object store gone.
func (s *SQL) deleteRunBlobs(tx Tx, list string) error {
	owned := `(namespace, run_id) IN (SELECT namespace, id FROM runs WHERE sequence IN ` + list + `)`
	if _, err := tx.Exec(`DELETE FROM blobs WHERE ` + owned); err != nil {
		return fmt.Errorf("deleting payloads: %w", err)
	}
	gone := "TRUE"
	if s.d.Param(1) != "$1" {
		gone = "1"
	}
	if _, err := tx.Exec(`UPDATE blob_owners SET gone = ` + gone + ` WHERE ` + owned); err != nil {
		return fmt.Errorf("marking payloads deleted: %w", err)
	}
	return nil
}
