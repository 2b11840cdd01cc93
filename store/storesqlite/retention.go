package storesqlite

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// Batch creation and retention are written once, in sqlstore (batch.go,
// retention.go); these run them in the driver's transactions.

// runsCreateRaw implements (under RunsCreate, payloads.go) store.BatchCreator: one transaction of the writer, one
// multi-row insert.
func (s *Store) runsCreateRaw(ctx context.Context, p *store.RunsCreateParams) (*store.RunsCreateResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("creating runs: %w", err)
	}
	if err := s.reserve.Load().admit(); err != nil {
		return nil, fmt.Errorf("creating runs: %w", err)
	}
	var res *store.RunsCreateResult
	err := s.write(ctx, func(tx *wtx) error {
		if err := shared.IdempotencyBegin(tx, p.Namespace, p.Idempotency); err != nil {
			return err
		}
		var err error
		if res, err = shared.RunsCreate(tx, p); err != nil {
			return err
		}
		return shared.IdempotencyFinish(tx, p.Namespace, p.Idempotency, res)
	})
	if err != nil {
		return nil, fmt.Errorf("creating runs: %w", err)
	}
	return res, nil
}

// runDeleteRaw implements (under RunDelete, payloads.go) store.RunDeleter.
func (s *Store) runDeleteRaw(ctx context.Context, p *store.RunDeleteParams) (*store.Run, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("deleting run: %w", err)
	}
	var run *store.Run
	err := s.write(ctx, func(tx *wtx) error {
		// The key's response renders nil, and no run sequence is kept with it:
		// the key outlives the run (store.RunDeleteParams).
		return shared.Guarded(tx, p.Namespace, p.Idempotency, func() (_ any, err error) {
			run, err = shared.RunDelete(tx, p)
			return nil, err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("deleting run: %w", err)
	}
	return run, nil
}

// runsPurgeRaw implements (under RunsPurge, payloads.go) store.RunDeleter. Losing a purge in a crash is harmless
// (the next one deletes the same rows), so it commits without fsync; each call
// is one short transaction of the writer, queued with checkpoints, never
// holding them up for longer than its batch takes.
func (s *Store) runsPurgeRaw(ctx context.Context, p *store.RunsPurgeParams) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("purging runs: %w", err)
	}
	var n int
	err := s.writeNoSync(ctx, func(tx *wtx) (err error) {
		n, err = shared.RunsPurge(tx, p)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("purging runs: %w", err)
	}
	return n, nil
}

// RunNamespaces implements store.RunDeleter.
func (s *Store) RunNamespaces(ctx context.Context) ([]string, error) {
	var out []string
	err := readSource{s}.Read(ctx, func(q sqlstore.Querier) (err error) {
		out, err = shared.RunNamespaces(q)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	return out, nil
}
