package sqlstore

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/blobs"
)

// Payloads stored apart (package store/blobs, docs/payloads.md): the store
// methods that write or read payloads wrap the state machines (the shared ones,
// or the driver's own, Own), moving the big payloads apart before a write and
// resolving them after a read. With nothing big, a write costs a length check a
// payload and a read a prefix check. The hot path's wrappers (Checkpoint,
// CheckpointTx, RunsClaim) are the drivers' own, calling CheckpointPayloads and
// ClaimedPayloads: no interface call between them and the driver's writer.

// RunCreate implements store.Store.
func (m *Methods) RunCreate(ctx context.Context, p *store.RunCreateParams) (*store.RunCreateResult, error) {
	q, err := m.payloadsCreate(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("creating run: %w", err)
	}
	res, err := m.own.RunCreate(ctx, q)
	if err != nil {
		return nil, err
	}
	if err := m.apart.CreateResult(ctx, res, blobs.Known(p, q)); err != nil {
		return nil, fmt.Errorf("creating run: %w", err)
	}
	return res, nil
}

// payloadsCreate validates p and moves its big payloads apart.
func (m *Methods) payloadsCreate(ctx context.Context, p *store.RunCreateParams) (*store.RunCreateParams, error) {
	if m.apart == nil || !m.apart.Big(p.Input) && len(p.History) == 0 && len(p.KV) == 0 {
		return p, nil
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return m.apart.Create(ctx, p)
}

// RunsCreate implements store.BatchCreator.
func (m *Methods) RunsCreate(ctx context.Context, p *store.RunsCreateParams) (*store.RunsCreateResult, error) {
	q, err := m.apart.RunsCreate(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("creating runs: %w", err)
	}
	res, err := m.runsCreate(ctx, q)
	if err != nil {
		return res, err
	}
	for i, it := range res.Items {
		var known blobs.Written
		if i < len(p.Runs) && q.Runs[i] != p.Runs[i] {
			known = blobs.Known(p.Runs[i], q.Runs[i])
		}
		if err := m.apart.RunKnown(ctx, it.Run, known); err != nil {
			return nil, fmt.Errorf("creating runs: %w", err)
		}
	}
	return res, nil
}

// EventSend implements store.Store. A big payload is stored apart as a
// payload of the run Ref names now.
func (m *Methods) EventSend(ctx context.Context, p *store.EventSendParams) (*store.EventSendResult, error) {
	q := p
	if m.apart.Big(p.Payload) {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("sending event: %w", err)
		}
		run, err := m.runGet(ctx, &store.RunGetParams{Namespace: p.Namespace, Ref: p.Ref})
		if err != nil {
			return nil, fmt.Errorf("sending event: %w", err)
		}
		if run.Status.Terminal() {
			return nil, fmt.Errorf("sending event: %w: run %s is %s", store.ErrRunFinished, run.ID, run.Status)
		}
		if q, err = m.apart.Event(ctx, p, run.ID); err != nil {
			return nil, fmt.Errorf("sending event: %w", err)
		}
	}
	res, err := m.own.EventSend(ctx, q)
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
	if err := m.apart.ClaimedKnown(ctx, res.Claimed, known); err != nil {
		return nil, fmt.Errorf("sending event: %w", err)
	}
	return res, nil
}

// RunGet implements store.Store.
func (m *Methods) RunGet(ctx context.Context, p *store.RunGetParams) (*store.Run, error) {
	run, err := m.runGet(ctx, p)
	if err != nil {
		return nil, err
	}
	if p.OmitLarge {
		blobs.Omit([]*store.Run{run})
		return run, nil
	}
	if err := m.apart.Run(ctx, run); err != nil {
		return nil, fmt.Errorf("reading run: %w", err)
	}
	return run, nil
}

// RunsGet implements store.Store.
func (m *Methods) RunsGet(ctx context.Context, p *store.RunsGetParams) ([]*store.Run, error) {
	runs, err := m.runsGet(ctx, p)
	if err != nil {
		return nil, err
	}
	if err := m.apart.Runs(ctx, runs); err != nil {
		return nil, fmt.Errorf("reading runs: %w", err)
	}
	return runs, nil
}

// RunList implements store.Store. It does not load payloads stored apart:
// a listed run has them empty (RunGet reads them).
func (m *Methods) RunList(ctx context.Context, p *store.RunListParams) (*store.RunListResult, error) {
	res, err := m.runList(ctx, p)
	if err != nil {
		return nil, err
	}
	blobs.Omit(res.Runs)
	return res, nil
}

// RunChildren implements store.Store.
func (m *Methods) RunChildren(ctx context.Context, p *store.RunChildrenParams) ([]*store.Run, error) {
	runs, err := m.reads.RunChildren(ctx, p)
	if err != nil {
		return nil, err
	}
	if err := m.apart.Runs(ctx, runs); err != nil {
		return nil, fmt.Errorf("reading children: %w", err)
	}
	return runs, nil
}

// RunCancel implements store.Store.
func (m *Methods) RunCancel(ctx context.Context, p *store.RunCancelParams) (*store.Run, error) {
	run, err := m.own.RunCancel(ctx, p)
	if err != nil {
		return nil, err
	}
	if err := m.apart.Run(ctx, run); err != nil {
		return nil, fmt.Errorf("cancelling run: %w", err)
	}
	return run, nil
}

// RunResume implements store.Store.
func (m *Methods) RunResume(ctx context.Context, p *store.RunResumeParams) (*store.Run, error) {
	run, err := m.own.RunResume(ctx, p)
	if err != nil {
		return nil, err
	}
	if err := m.apart.Run(ctx, run); err != nil {
		return nil, fmt.Errorf("resuming run: %w", err)
	}
	return run, nil
}

// RunDelete implements store.RunDeleter. The run it returns has lost its
// payloads stored apart with it (they are left empty).
func (m *Methods) RunDelete(ctx context.Context, p *store.RunDeleteParams) (*store.Run, error) {
	run, err := m.runDelete(ctx, p)
	if err != nil {
		return nil, err
	}
	blobs.Omit([]*store.Run{run})
	m.collectBlobs(ctx)
	return run, nil
}

// RunsPurge implements store.RunDeleter; it then deletes the objects of the
// runs deleted (an object store's payloads: the table's go with their runs).
func (m *Methods) RunsPurge(ctx context.Context, p *store.RunsPurgeParams) (int, error) {
	n, err := m.runsPurge(ctx, p)
	if err != nil {
		return n, err
	}
	m.collectBlobs(ctx)
	return n, nil
}

// collectBlobs deletes the objects of deleted runs, when the payloads are in
// an object store. A failure is logged: the marks stay, and the next deletion
// or purge tries again.
func (m *Methods) collectBlobs(ctx context.Context) {
	if m.tracked == nil {
		return
	}
	for {
		n, err := m.tracked.Collect(ctx, 100)
		if err != nil {
			m.log.Warn(m.name+": deleting payloads of deleted runs", "err", err)
			return
		}
		if n < 100 {
			return
		}
	}
}

// CollectBlobs deletes the objects of deleted runs now (tests; a purge does
// it as it goes).
func (m *Methods) CollectBlobs(ctx context.Context) error {
	if m.tracked == nil {
		return nil
	}
	_, err := m.tracked.Collect(ctx, 1000)
	return err
}

// HistoryList implements store.Store.
func (m *Methods) HistoryList(ctx context.Context, p *store.HistoryListParams) ([]*store.Op, error) {
	ops, err := m.own.HistoryList(ctx, p)
	if err != nil {
		return nil, err
	}
	if p.OmitLarge {
		blobs.OmitOps(ops)
		return ops, nil
	}
	if err := m.apart.Ops(ctx, p.Namespace, ops); err != nil {
		return nil, fmt.Errorf("reading history: %w", err)
	}
	return ops, nil
}

// KVGet implements store.Store.
func (m *Methods) KVGet(ctx context.Context, p *store.KVGetParams) ([]byte, error) {
	v, err := m.reads.KVGet(ctx, p)
	if err != nil {
		return nil, err
	}
	if v, err = m.apart.Value(ctx, p.Namespace, v); err != nil {
		return nil, fmt.Errorf("reading run store: %w", err)
	}
	return v, nil
}

// StreamRead implements store.Store.
func (m *Methods) StreamRead(ctx context.Context, p *store.StreamReadParams) (*store.StreamReadResult, error) {
	res, err := m.reads.StreamRead(ctx, p)
	if err != nil {
		return nil, err
	}
	if err := m.apart.Stream(ctx, p.Namespace, res); err != nil {
		return nil, fmt.Errorf("reading stream: %w", err)
	}
	return res, nil
}

// Payloads is the store's handling of payloads stored apart (nil: none is,
// a store opened with NoMigrate on a schema without the table, say).
func (m *Methods) Payloads() *blobs.Payloads { return m.apart }

// runGet reads a run (under RunGet), explaining why a pending one waits.
func (m *Methods) runGet(ctx context.Context, p *store.RunGetParams) (*store.Run, error) {
	r, err := m.reads.RunGet(ctx, p)
	return store.ExplainRun(ctx, m.reg, p.Namespace, r, err)
}

// runList lists runs (under RunList), explaining why pending ones wait.
func (m *Methods) runList(ctx context.Context, p *store.RunListParams) (*store.RunListResult, error) {
	res, err := m.reads.RunList(ctx, p)
	return store.ExplainPage(ctx, m.reg, p.Namespace, res, err)
}

// OpenBlobs makes the store's handling of payloads stored apart (m.Payloads):
// the table blobs, or the object store obj; threshold is Config.BlobThreshold.
func OpenBlobs(m *Methods, obj blobs.Backend, threshold int) {
	table := &TableBlobs{SQL: m.sql, Read: m.d.Read, Write: m.d.Write}
	var b blobs.Backend = table
	if obj != nil {
		m.tracked = &TrackedBlobs{Backend: obj, SQL: m.sql, Write: table.Write, Read: table.Read}
		b = m.tracked
	}
	m.apart = blobs.New(b, threshold)
}

// CloseBlobs closes the object store of the payloads, if any.
func CloseBlobs(m *Methods) error {
	if m.tracked == nil {
		return nil
	}
	return m.tracked.Backend.Close()
}

// InObjectStore reports whether the payloads stored apart are in an object
// store (not the table blobs).
func InObjectStore(m *Methods) bool { return m.tracked != nil }

// CheckpointPayloads moves the big payloads of a checkpoint apart (under a
// driver's Checkpoint and CheckpointTx): the driver writes what it returns.
func CheckpointPayloads(m *Methods, ctx context.Context, p *store.CheckpointParams) (*store.CheckpointParams, error) {
	q, err := m.apart.Checkpoint(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("checkpointing: %w", err)
	}
	return q, nil
}

// ClaimedPayloads completes a driver's claim (under its RunsClaim, res and
// err its result): each claimed run comes with its input, history and inbox
// whole.
func ClaimedPayloads(m *Methods, ctx context.Context, res *store.RunsClaimResult, err error) (*store.RunsClaimResult, error) {
	if err != nil || m.apart == nil {
		return res, err
	}
	for _, c := range res.Runs {
		if err := m.apart.Claimed(ctx, c); err != nil {
			// The leases are held: the runs come back when they expire.
			return nil, fmt.Errorf("claiming runs: %w", err)
		}
	}
	return res, nil
}

// RunCreateTx implements store.TxStarter around a driver's create in the
// caller's transaction: ap stores the big payloads apart (m's, or one that
// writes in that transaction), create writes the run.
func RunCreateTx(m *Methods, ctx context.Context, ap *blobs.Payloads, p *store.RunCreateParams,
	create func(q *store.RunCreateParams) (*store.RunCreateResult, error)) (*store.RunCreateResult, error) {
	q := p
	if ap.Big(p.Input) || len(p.History) > 0 || len(p.KV) > 0 {
		if err := p.Validate(); err != nil {
			return nil, fmt.Errorf("creating run in a transaction: %w", err)
		}
		var err error
		if q, err = ap.Create(ctx, p); err != nil {
			return nil, fmt.Errorf("creating run in a transaction: %w", err)
		}
	}
	res, err := create(q)
	if err != nil {
		return nil, err
	}
	if err := m.apart.CreateResult(ctx, res, blobs.Known(p, q)); err != nil {
		return nil, fmt.Errorf("creating run in a transaction: %w", err)
	}
	return res, nil
}

// OpenObjectBlobs opens the object store of a driver's Config.Blobs (nil when
// url is empty): a driver's Open does it first, so that a bad URL or an
// unreachable object store changes nothing.
func OpenObjectBlobs(ctx context.Context, url string) (blobs.Backend, error) {
	if url == "" {
		return nil, nil
	}
	return blobs.Open(ctx, url)
}
