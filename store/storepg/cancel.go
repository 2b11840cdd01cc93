package storepg

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// RunCancel implements sqlstore.Own: store.Store's RunCancel, under the payloads stored apart. It runs in a transaction of its own: cancelling
// a parent cancels its children, recursively, and a child that ends at once is
// counted in its group (see txn.go).
func (d seam) RunCancel(ctx context.Context, p *store.RunCancelParams) (*store.Run, error) {
	s := d.s
	if err := p.Idempotency.Validate(); err != nil {
		return nil, fmt.Errorf("cancelling run: %w", err)
	}
	var run *store.Run
	err := s.inTx(ctx, func(tx *wtx) error {
		if err := shared.IdempotencyBegin(stx{tx}, p.Namespace, p.Idempotency); err != nil {
			return err
		}
		r, err := lockRun(tx, p.Namespace, p.Ref)
		if err != nil {
			return err
		}
		if r.Status.Terminal() {
			return fmt.Errorf("%w: run %q is %s", store.ErrRunFinished, r.ID, r.Status)
		}
		if run, err = shared.CancelRun(stx{tx}, r.Run); err != nil {
			return err
		}
		return shared.IdempotencyFinish(stx{tx}, p.Namespace, p.Idempotency, run)
	})
	if err != nil {
		return nil, fmt.Errorf("cancelling run: %w", err)
	}
	return run, nil
}
