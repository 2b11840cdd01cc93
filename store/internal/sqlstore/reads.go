package sqlstore

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// ReadSource is how a driver runs a read: on its read pool, after its closed
// check, with its retries, its errors mapped (store.ErrClosed after Close).
type ReadSource interface {
	Read(ctx context.Context, fn func(q Querier) error) error
}

// Reads implements the read methods of store.Store that the drivers share: each
// driver's method is one call to these.
type Reads struct {
	sql *SQL
	src ReadSource
}

// Reads returns the shared reads over src.
func (s *SQL) Reads(src ReadSource) Reads { return Reads{sql: s, src: src} }

// read runs fn through the source and wraps its error with what.
func (r Reads) read(ctx context.Context, what string, fn func(q Querier) error) error {
	if err := r.src.Read(ctx, fn); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// RunGet implements store.Store.
func (r Reads) RunGet(ctx context.Context, p *store.RunGetParams) (*store.Run, error) {
	var run *store.Run
	err := r.read(ctx, "getting run", func(q Querier) (err error) {
		run, err = r.sql.RunByRef(q, p.Namespace, p.Ref)
		return err
	})
	if err != nil {
		return nil, err
	}
	return run, nil
}

// RunList implements store.Store.
func (r Reads) RunList(ctx context.Context, p *store.RunListParams) (*store.RunListResult, error) {
	var res *store.RunListResult
	err := r.read(ctx, "listing runs", func(q Querier) (err error) {
		res, err = r.sql.RunList(q, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}

// RunChildren implements store.Store.
func (r Reads) RunChildren(ctx context.Context, p *store.RunChildrenParams) ([]*store.Run, error) {
	var runs []*store.Run
	err := r.read(ctx, "listing children", func(q Querier) (err error) {
		runs, err = r.sql.RunChildren(q, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return runs, nil
}

// KVGet implements store.Store.
func (r Reads) KVGet(ctx context.Context, p *store.KVGetParams) ([]byte, error) {
	var v []byte
	err := r.read(ctx, "getting key", func(q Querier) (err error) {
		v, err = r.sql.KVGet(q, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return v, nil
}

// ApprovalGet implements store.Store.
func (r Reads) ApprovalGet(ctx context.Context, p *store.ApprovalGetParams) (*store.Approval, error) {
	var a *store.Approval
	err := r.read(ctx, "getting approval", func(q Querier) (err error) {
		a, err = r.sql.ApprovalGet(q, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// ApprovalList implements store.Store.
func (r Reads) ApprovalList(ctx context.Context, p *store.ApprovalListParams) (*store.ApprovalListResult, error) {
	var res *store.ApprovalListResult
	err := r.read(ctx, "listing approvals", func(q Querier) (err error) {
		res, err = r.sql.ApprovalList(q, p)
		return err
	})
	if err != nil {
		return nil, err
	}
	return res, nil
}
