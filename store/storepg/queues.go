package storepg

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// The queue store is written once, in sqlstore (queues.go); these are its entry
// points.

// NamespaceCreate implements store.QueueStore.
func (s *Store) NamespaceCreate(ctx context.Context, p *store.NamespaceCreateParams) (*store.Namespace, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("creating namespace: %w", err)
	}
	var ns *store.Namespace
	err := s.inTx(ctx, func(tx *wtx) error {
		return shared.Guarded(stx{tx}, p.Name, p.Idempotency, func() (_ any, err error) {
			ns, err = shared.NamespaceCreate(stx{tx}, p)
			return ns, err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("creating namespace: %w", err)
	}
	return ns, nil
}

// NamespaceGet implements store.QueueStore.
func (s *Store) NamespaceGet(ctx context.Context, p *store.NamespaceGetParams) (*store.Namespace, error) {
	return shared.Reads(readSource{s}).NamespaceGet(ctx, p)
}

// NamespaceList implements store.QueueStore.
func (s *Store) NamespaceList(ctx context.Context) ([]*store.Namespace, error) {
	return shared.Reads(readSource{s}).NamespaceList(ctx)
}

// NamespaceUpdate implements store.QueueStore.
func (s *Store) NamespaceUpdate(ctx context.Context, p *store.NamespaceUpdateParams) (*store.Namespace, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("updating namespace: %w", err)
	}
	var ns *store.Namespace
	err := s.inTx(ctx, func(tx *wtx) error {
		return shared.Guarded(stx{tx}, p.Name, p.Idempotency, func() (_ any, err error) {
			ns, err = shared.NamespaceUpdate(stx{tx}, p)
			return ns, err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("updating namespace: %w", err)
	}
	return ns, nil
}

// QueueCreate implements store.QueueStore.
func (s *Store) QueueCreate(ctx context.Context, p *store.QueueCreateParams) (*store.Queue, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("creating queue: %w", err)
	}
	var q *store.Queue
	err := s.inTx(ctx, func(tx *wtx) error {
		return shared.Guarded(stx{tx}, p.Namespace, p.Idempotency, func() (_ any, err error) {
			q, err = shared.QueueCreate(stx{tx}, p)
			return q, err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("creating queue: %w", err)
	}
	return q, nil
}

// QueueGet implements store.QueueStore.
func (s *Store) QueueGet(ctx context.Context, p *store.QueueGetParams) (*store.Queue, error) {
	return shared.Reads(readSource{s}).QueueGet(ctx, p)
}

// QueueList implements store.QueueStore.
func (s *Store) QueueList(ctx context.Context, p *store.QueueListParams) ([]*store.Queue, error) {
	return shared.Reads(readSource{s}).QueueList(ctx, p)
}

// QueueUpdate implements store.QueueStore.
func (s *Store) QueueUpdate(ctx context.Context, p *store.QueueUpdateParams) (*store.Queue, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("updating queue: %w", err)
	}
	var q *store.Queue
	err := s.inTx(ctx, func(tx *wtx) error {
		return shared.Guarded(stx{tx}, p.Namespace, p.Idempotency, func() (_ any, err error) {
			q, err = shared.QueueUpdate(stx{tx}, p)
			return q, err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("updating queue: %w", err)
	}
	return q, nil
}

// QueueSetPaused implements store.QueueStore.
func (s *Store) QueueSetPaused(ctx context.Context, p *store.QueueSetPausedParams) (*store.Queue, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("pausing queue: %w", err)
	}
	var q *store.Queue
	err := s.inTx(ctx, func(tx *wtx) error {
		return shared.Guarded(stx{tx}, p.Namespace, p.Idempotency, func() (_ any, err error) {
			q, err = shared.QueueSetPaused(stx{tx}, p)
			return q, err
		})
	})
	if err != nil {
		return nil, fmt.Errorf("pausing queue: %w", err)
	}
	return q, nil
}
