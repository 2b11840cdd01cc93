package store

import "context"

// Optional capabilities of SQL drivers, in the manner of database/sql/driver: a
// caller checks for them with a type assertion. The remote-worker client does not
// implement them: they need the store's own database.

// TxStarter creates runs inside a transaction the caller opened on the store's
// database, so that the run exists if and only if that transaction commits.
type TxStarter interface {
	// RunCreateTx is RunCreate inside tx: a pgx.Tx for storepg, a *sql.Tx on the
	// same database file for storesqlite. Any other type of tx, and a Claim (the
	// run must not start before the caller commits), are ErrInvalidParams. A
	// rejected start (ErrRunExists) leaves tx usable. Wake-ups: storepg notifies
	// workers when tx commits (NOTIFY is transactional); storesqlite cannot see the
	// commit, so the run waits for a worker's next poll.
	RunCreateTx(ctx context.Context, tx any, p *RunCreateParams) (*RunCreateResult, error)
}

// TxCheckpointer commits a step's own database writes and its checkpoint in one
// transaction on the store's database: exactly-once effects for database steps.
type TxCheckpointer interface {
	// CheckpointTx begins a transaction, calls fn with it (a pgx.Tx for storepg, a
	// *sql.Tx for storesqlite), then, if fn returns nil, writes the checkpoint p in
	// the same transaction and commits. fn may complete p (typically, append the
	// step's op with its result). If fn fails, the transaction is rolled back and
	// fn's error is returned as is. If the lease is stale, nothing commits, fn's
	// writes included, and the error is ErrLeaseLost. fn must not keep tx.
	CheckpointTx(ctx context.Context, p *CheckpointParams, fn func(ctx context.Context, tx any) error) (*CheckpointResult, error)
}
