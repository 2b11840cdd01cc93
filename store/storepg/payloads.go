package storepg

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/blobs"
)

// Payloads stored apart (package store/blobs, docs/payloads.md): the store
// methods that write or read payloads are these wrappers of the driver's own
// (the *Raw methods), which move the big payloads apart before a write and
// resolve them after a read. With nothing big, a write costs a length check a
// payload and a read a prefix check.

// RunCreate implements store.Store.
func (s *Store) RunCreate(ctx context.Context, p *store.RunCreateParams) (*store.RunCreateResult, error) {
	q, err := s.payloadsCreate(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("creating run: %w", err)
	}
	res, err := s.runCreateRaw(ctx, q)
	if err != nil {
		return nil, err
	}
	if err := s.apart.CreateResult(ctx, res, blobs.Known(p, q)); err != nil {
		return nil, fmt.Errorf("creating run: %w", err)
	}
	return res, nil
}

// payloadsCreate validates p and moves its big payloads apart.
func (s *Store) payloadsCreate(ctx context.Context, p *store.RunCreateParams) (*store.RunCreateParams, error) {
	if s.apart == nil || !s.apart.Big(p.Input) && len(p.History) == 0 && len(p.KV) == 0 {
		return p, nil
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return s.apart.Create(ctx, p)
}

// RunsCreate implements store.BatchCreator.
func (s *Store) RunsCreate(ctx context.Context, p *store.RunsCreateParams) (*store.RunsCreateResult, error) {
	q, err := s.apart.RunsCreate(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("creating runs: %w", err)
	}
	res, err := s.runsCreateRaw(ctx, q)
	if err != nil {
		return res, err
	}
	for i, it := range res.Items {
		var known blobs.Written
		if i < len(p.Runs) && q.Runs[i] != p.Runs[i] {
			known = blobs.Known(p.Runs[i], q.Runs[i])
		}
		if err := s.apart.RunKnown(ctx, it.Run, known); err != nil {
			return nil, fmt.Errorf("creating runs: %w", err)
		}
	}
	return res, nil
}

// Checkpoint implements store.Store.
func (s *Store) Checkpoint(ctx context.Context, p *store.CheckpointParams) (*store.CheckpointResult, error) {
	q, err := s.apart.Checkpoint(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("checkpointing: %w", err)
	}
	return s.checkpointRaw(ctx, q)
}

// CheckpointTx implements store.TxCheckpointer.
func (s *Store) CheckpointTx(ctx context.Context, p *store.CheckpointParams, fn func(ctx context.Context, tx any) error) (*store.CheckpointResult, error) {
	q, err := s.apart.Checkpoint(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("checkpointing: %w", err)
	}
	return s.checkpointTxRaw(ctx, q, fn)
}

// EventSend implements store.Store. A big payload is stored apart as a
// payload of the run Ref names now.
func (s *Store) EventSend(ctx context.Context, p *store.EventSendParams) (*store.EventSendResult, error) {
	q := p
	if s.apart.Big(p.Payload) {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("sending event: %w", err)
		}
		run, err := s.runGetRaw(ctx, &store.RunGetParams{Namespace: p.Namespace, Ref: p.Ref})
		if err != nil {
			return nil, fmt.Errorf("sending event: %w", err)
		}
		if run.Status.Terminal() {
			return nil, fmt.Errorf("sending event: %w: run %s is %s", store.ErrRunFinished, run.ID, run.Status)
		}
		if q, err = s.apart.Event(ctx, p, run.ID); err != nil {
			return nil, fmt.Errorf("sending event: %w", err)
		}
	}
	res, err := s.eventSendRaw(ctx, q)
	if err != nil {
		return nil, err
	}
	var known blobs.Written
	if q != p {
		known = blobs.Written{string(q.Payload): p.Payload}
		if res.Event != nil {
			res.Event.Payload = p.Payload
		}
	}
	if err := s.apart.ClaimedKnown(ctx, res.Claimed, known); err != nil {
		return nil, fmt.Errorf("sending event: %w", err)
	}
	return res, nil
}

// RunGet implements store.Store.
func (s *Store) RunGet(ctx context.Context, p *store.RunGetParams) (*store.Run, error) {
	run, err := s.runGetRaw(ctx, p)
	if err != nil {
		return nil, err
	}
	if p.OmitLarge {
		blobs.Omit([]*store.Run{run})
		return run, nil
	}
	if err := s.apart.Run(ctx, run); err != nil {
		return nil, fmt.Errorf("reading run: %w", err)
	}
	return run, nil
}

// RunsGet implements store.Store.
func (s *Store) RunsGet(ctx context.Context, p *store.RunsGetParams) ([]*store.Run, error) {
	runs, err := s.runsGetRaw(ctx, p)
	if err != nil {
		return nil, err
	}
	if err := s.apart.Runs(ctx, runs); err != nil {
		return nil, fmt.Errorf("reading runs: %w", err)
	}
	return runs, nil
}

// RunList implements store.Store. It does not load payloads stored apart:
// a listed run has them empty (RunGet reads them).
func (s *Store) RunList(ctx context.Context, p *store.RunListParams) (*store.RunListResult, error) {
	res, err := s.runListRaw(ctx, p)
	if err != nil {
		return nil, err
	}
	blobs.Omit(res.Runs)
	return res, nil
}

// RunChildren implements store.Store.
func (s *Store) RunChildren(ctx context.Context, p *store.RunChildrenParams) ([]*store.Run, error) {
	runs, err := s.runChildrenRaw(ctx, p)
	if err != nil {
		return nil, err
	}
	if err := s.apart.Runs(ctx, runs); err != nil {
		return nil, fmt.Errorf("reading children: %w", err)
	}
	return runs, nil
}

// RunCancel implements store.Store.
func (s *Store) RunCancel(ctx context.Context, p *store.RunCancelParams) (*store.Run, error) {
	run, err := s.runCancelRaw(ctx, p)
	if err != nil {
		return nil, err
	}
	if err := s.apart.Run(ctx, run); err != nil {
		return nil, fmt.Errorf("cancelling run: %w", err)
	}
	return run, nil
}

// RunResume implements store.Store.
func (s *Store) RunResume(ctx context.Context, p *store.RunResumeParams) (*store.Run, error) {
	run, err := s.runResumeRaw(ctx, p)
	if err != nil {
		return nil, err
	}
	if err := s.apart.Run(ctx, run); err != nil {
		return nil, fmt.Errorf("resuming run: %w", err)
	}
	return run, nil
}

// RunDelete implements store.RunDeleter. The run it returns has lost its
// payloads stored apart with it (they are left empty).
func (s *Store) RunDelete(ctx context.Context, p *store.RunDeleteParams) (*store.Run, error) {
	run, err := s.runDeleteRaw(ctx, p)
	if err != nil {
		return nil, err
	}
	blobs.Omit([]*store.Run{run})
	s.collectBlobs(ctx)
	return run, nil
}

// RunsPurge implements store.RunDeleter; it then deletes the objects of the
// runs deleted (an object store's payloads: the table's go with their runs).
func (s *Store) RunsPurge(ctx context.Context, p *store.RunsPurgeParams) (int, error) {
	n, err := s.runsPurgeRaw(ctx, p)
	if err != nil {
		return n, err
	}
	s.collectBlobs(ctx)
	return n, nil
}

// collectBlobs deletes the objects of deleted runs, when the payloads are in
// an object store. A failure is logged: the marks stay, and the next deletion
// or purge tries again.
func (s *Store) collectBlobs(ctx context.Context) {
	if s.trackedBlobs == nil {
		return
	}
	for {
		n, err := s.trackedBlobs.Collect(ctx, 100)
		if err != nil {
			s.log.Warn("storepg: deleting payloads of deleted runs", "err", err)
			return
		}
		if n < 100 {
			return
		}
	}
}

// CollectBlobs deletes the objects of deleted runs now (tests; a purge does
// it as it goes).
func (s *Store) CollectBlobs(ctx context.Context) error {
	if s.trackedBlobs == nil {
		return nil
	}
	_, err := s.trackedBlobs.Collect(ctx, 1000)
	return err
}

// RunsClaim implements store.Store: each claimed run comes with its input,
// history and inbox whole.
func (s *Store) RunsClaim(ctx context.Context, p *store.RunsClaimParams) (*store.RunsClaimResult, error) {
	res, err := s.runsClaimRaw(ctx, p)
	if err != nil || s.apart == nil {
		return res, err
	}
	for _, c := range res.Runs {
		if err := s.apart.Claimed(ctx, c); err != nil {
			// The leases are held: the runs come back when they expire.
			return nil, fmt.Errorf("claiming runs: %w", err)
		}
	}
	return res, nil
}

// HistoryList implements store.Store.
func (s *Store) HistoryList(ctx context.Context, p *store.HistoryListParams) ([]*store.Op, error) {
	ops, err := s.historyListRaw(ctx, p)
	if err != nil {
		return nil, err
	}
	if p.OmitLarge {
		blobs.OmitOps(ops)
		return ops, nil
	}
	if err := s.apart.Ops(ctx, p.Namespace, ops); err != nil {
		return nil, fmt.Errorf("reading history: %w", err)
	}
	return ops, nil
}

// KVGet implements store.Store.
func (s *Store) KVGet(ctx context.Context, p *store.KVGetParams) ([]byte, error) {
	v, err := s.kvGetRaw(ctx, p)
	if err != nil {
		return nil, err
	}
	if v, err = s.apart.Value(ctx, p.Namespace, v); err != nil {
		return nil, fmt.Errorf("reading run store: %w", err)
	}
	return v, nil
}

// StreamRead implements store.Store.
func (s *Store) StreamRead(ctx context.Context, p *store.StreamReadParams) (*store.StreamReadResult, error) {
	res, err := s.streamReadRaw(ctx, p)
	if err != nil {
		return nil, err
	}
	if err := s.apart.Stream(ctx, p.Namespace, res); err != nil {
		return nil, fmt.Errorf("reading stream: %w", err)
	}
	return res, nil
}

// Payloads is the store's handling of payloads stored apart (nil: none is,
// a store opened with NoMigrate on a schema without the table, say).
func (s *Store) Payloads() *blobs.Payloads { return s.apart }
