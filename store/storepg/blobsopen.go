package storepg

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/blobs"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// openObjectBlobs opens the object store of Config.Blobs (nil when none): Open
// does it first, so that a bad URL or an unreachable object store changes
// nothing.
func openObjectBlobs(ctx context.Context, cfg Config) (blobs.Backend, error) {
	if cfg.Blobs == "" {
		return nil, nil
	}
	return blobs.Open(ctx, cfg.Blobs)
}

// openBlobs makes the store's handling of payloads stored apart: the table
// blobs, or the object store obj.
func (s *Store) openBlobs(obj blobs.Backend) {
	table := &sqlstore.TableBlobs{SQL: shared, Read: readSource{s}.Read,
		Write: func(ctx context.Context, fn func(tx sqlstore.Tx) error) error {
			return s.inTx(ctx, func(tx *wtx) error { return fn(stx{tx}) })
		}}
	var b blobs.Backend = table
	if obj != nil {
		s.trackedBlobs = &sqlstore.TrackedBlobs{Backend: obj, SQL: shared, Write: table.Write, Read: table.Read}
		b = s.trackedBlobs
	}
	s.apart = blobs.New(b, s.cfg.BlobThreshold)
}

// closeBlobs closes the object store, if any.
func (s *Store) closeBlobs() error {
	if s.trackedBlobs == nil {
		return nil
	}
	return s.trackedBlobs.Backend.Close()
}

// RunCreateTx implements store.TxStarter. Payloads stored apart are written
// before, on the pool: a rolled-back tx leaves them until a purge of their run.
func (s *Store) RunCreateTx(ctx context.Context, tx any, p *store.RunCreateParams) (*store.RunCreateResult, error) {
	q := p
	if s.apart.Big(p.Input) || len(p.History) > 0 || len(p.KV) > 0 {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("creating run in a transaction: %w", err)
		}
		var err error
		if q, err = s.apart.Create(ctx, p); err != nil {
			return nil, fmt.Errorf("creating run in a transaction: %w", err)
		}
	}
	res, err := s.runCreateTxRaw(ctx, tx, q)
	if err != nil {
		return nil, err
	}
	if err := s.apart.CreateResult(ctx, res, blobs.Known(p, q)); err != nil {
		return nil, fmt.Errorf("creating run in a transaction: %w", err)
	}
	return res, nil
}
