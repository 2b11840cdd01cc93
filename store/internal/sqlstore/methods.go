package sqlstore

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/blobs"
)

// Driver is how the store methods written here (Methods) enter a driver's
// transactions: the one seam between them and a driver. A driver implements it
// on a small adapter of its store.
type Driver interface {
	// Read runs fn on the driver's read pool, after its closed check, with its
	// retries, its errors mapped (store.ErrClosed after Close).
	Read(ctx context.Context, fn func(q Querier) error) error
	// Write runs fn in a write transaction and commits it durably, publishing
	// the topics fn queued once it has. fn may be run again from the start (a
	// retried deadlock): it must keep no state across calls but what it
	// overwrites.
	Write(ctx context.Context, fn func(tx Tx) error) error
	// WriteNoSync is Write for writes a crash may lose without harm (purges,
	// last-used times): a driver may commit them without waiting for the disk.
	WriteNoSync(ctx context.Context, fn func(tx Tx) error) error
	// Admit refuses a write that adds runs when the driver keeps no room for
	// them (SQLite's disk reserve); nil when it may go ahead.
	Admit() error
	// Now reads the driver's clock.
	Now() time.Time
}

// Own is what a driver writes on its own because its SQL or its round trips
// differ: the methods here wrap these with the payloads stored apart. Its
// errors are already wrapped with what failed.
type Own interface {
	RunCreate(ctx context.Context, p *store.RunCreateParams) (*store.RunCreateResult, error)
	// RunCreateIn creates a run in tx, a transaction of Driver.Write, and
	// signals the workers once it commits (a schedule's fire).
	RunCreateIn(tx Tx, p *store.RunCreateParams) (*store.RunCreateResult, error)
	EventSend(ctx context.Context, p *store.EventSendParams) (*store.EventSendResult, error)
	RunCancel(ctx context.Context, p *store.RunCancelParams) (*store.Run, error)
	RunResume(ctx context.Context, p *store.RunResumeParams) (*store.Run, error)
	HistoryList(ctx context.Context, p *store.HistoryListParams) ([]*store.Op, error)
}

// Methods are the methods of store.Store (and its optional interfaces) that the
// SQL drivers share, each its state machine of this package entered through
// Driver. A driver's store embeds Methods and binds it in Open (Bind), so that
// these are its methods; what it writes itself (claims, checkpoints, heartbeats:
// the hot path, with no interface between it and its writer) it defines beside
// them.
//
// Every exported method of Methods is a method of the drivers' stores: what
// only the drivers call are functions of this package.
type Methods struct {
	sql   *SQL
	d     Driver
	own   Own
	reg   store.WorkerRegistry // the driver's store: why a pending run waits
	reads Reads
	log   *slog.Logger
	name  string // the driver's package, in log messages

	apart   *blobs.Payloads // payloads stored apart (apart.go); nil until OpenBlobs
	tracked *TrackedBlobs   // the object store's, when one holds the payloads
}

// Binding is what Bind ties a driver's Methods to.
type Binding struct {
	SQL     *SQL                 // the driver's shared logic (New)
	Driver  Driver               // how to enter its transactions
	Own     Own                  // what it writes on its own
	Workers store.WorkerRegistry // its store, which explains why a pending run waits
	Log     *slog.Logger
	Name    string // the driver's package, in log messages
}

// Bind readies m, the Methods of a driver's store, before its first use.
func Bind(m *Methods, b Binding) {
	*m = Methods{sql: b.SQL, d: b.Driver, own: b.Own, reg: b.Workers, reads: b.SQL.Reads(b.Driver), log: b.Log, name: b.Name}
}

// write runs fn in a durable write transaction of the driver and wraps its
// error with what.
func (m *Methods) write(ctx context.Context, what string, fn func(tx Tx) error) error {
	if err := m.d.Write(ctx, fn); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// writeNoSync is write for what a crash may lose without harm.
func (m *Methods) writeNoSync(ctx context.Context, what string, fn func(tx Tx) error) error {
	if err := m.d.WriteNoSync(ctx, fn); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// guarded runs fn in a write transaction between the idempotency key's
// IdempotencyBegin and IdempotencyFinish, recording what fn returns as the
// call's response.
func guarded[T any](m *Methods, ctx context.Context, what, namespace string, r *store.IdempotencyRecord,
	fn func(tx Tx) (T, error)) (T, error) {
	var res T
	err := m.write(ctx, what, func(tx Tx) error {
		if err := m.sql.IdempotencyBegin(tx, namespace, r); err != nil {
			return err
		}
		var err error
		if res, err = fn(tx); err != nil {
			return err
		}
		return m.sql.IdempotencyFinish(tx, namespace, r, res)
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return res, nil
}

// written runs fn in a durable write transaction and returns what it made.
func written[T any](m *Methods, ctx context.Context, what string, fn func(tx Tx) (T, error)) (T, error) {
	var res T
	err := m.write(ctx, what, func(tx Tx) (err error) {
		res, err = fn(tx)
		return err
	})
	if err != nil {
		var zero T
		return zero, err
	}
	return res, nil
}

// purged runs a purge (n rows deleted) in a write transaction that a crash may
// lose without harm.
func (m *Methods) purged(ctx context.Context, what string, fn func(tx Tx) (int, error)) (int, error) {
	var n int
	err := m.writeNoSync(ctx, what, func(tx Tx) (err error) {
		n, err = fn(tx)
		return err
	})
	if err != nil {
		return 0, err
	}
	return n, nil
}
