package storeroute

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/trellis-dev/trellis/store"
)

// leaseTable remembers, per owner, the epochs of the scheduler lease this
// router holds in each store (index as in router.stores; [0] is the control
// store's, the epoch its callers see).
type leaseTable struct {
	mu     sync.Mutex
	n      int
	epochs map[string][]int64
}

func (t *leaseTable) init(n int) { t.n, t.epochs = n, make(map[string][]int64) }

// of returns the epochs owner holds with control epoch epoch, or zeros.
func (t *leaseTable) of(owner string, epoch int64) []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	if e := t.epochs[owner]; e != nil && e[0] == epoch {
		return slices.Clone(e)
	}
	return make([]int64, t.n)
}

func (t *leaseTable) set(owner string, epochs []int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.epochs[owner] = epochs
}

// forget drops owner's epochs when they are those of control epoch epoch, and
// returns them (nil when they are not).
func (t *leaseTable) forget(owner string, epoch int64) []int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.epochs[owner]
	if e == nil || e[0] != epoch {
		return nil
	}
	delete(t.epochs, owner)
	return e
}

// storeEpoch returns the epoch in store i that goes with control epoch epoch.
func (t *leaseTable) storeEpoch(epoch int64, i int) (int64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, e := range t.epochs {
		if e[0] == epoch {
			return e[i], true
		}
	}
	return 0, false
}

// SchedulerLeaseAcquire implements store.ScheduleStore: the lease is taken or
// renewed in every store, the control store first; it is held only when it is
// held in all of them (see the package doc). The epoch returned is the control
// store's; the lease expires when the first of the stores' does.
func (r *router) SchedulerLeaseAcquire(ctx context.Context, p *store.SchedulerLeaseParams) (*store.SchedulerLease, error) {
	if len(r.stores) == 1 {
		return r.control.SchedulerLeaseAcquire(ctx, p)
	}
	if err := p.Validate(true); err != nil {
		return nil, fmt.Errorf("acquiring scheduler lease: %w", err)
	}
	epochs := r.leases.of(p.Owner, p.Epoch)
	epochs[0] = p.Epoch
	var lease *store.SchedulerLease
	for i, st := range r.stores {
		l, err := st.SchedulerLeaseAcquire(ctx, &store.SchedulerLeaseParams{Owner: p.Owner, Epoch: epochs[i], Duration: p.Duration})
		if err == nil && !l.Held {
			// Another holds this store's lease: give back those taken.
			err = r.releaseLeases(ctx, p.Owner, epochs[:i])
			r.leases.forget(p.Owner, p.Epoch)
			return l, err
		}
		if err != nil {
			_ = r.releaseLeases(ctx, p.Owner, epochs[:i]) // the first error is the one to tell
			r.leases.forget(p.Owner, p.Epoch)
			return nil, err
		}
		epochs[i] = l.Epoch
		if lease == nil {
			lease = l
		} else if l.ExpiresAt.Before(lease.ExpiresAt) {
			lease.ExpiresAt = l.ExpiresAt
		}
	}
	r.leases.set(p.Owner, epochs)
	return lease, nil
}

// SchedulerLeaseRelease implements store.ScheduleStore: the lease ends in
// every store this router took it in with p's epoch (in the control store
// alone when it knows of none).
func (r *router) SchedulerLeaseRelease(ctx context.Context, p *store.SchedulerLeaseParams) error {
	if len(r.stores) == 1 {
		return r.control.SchedulerLeaseRelease(ctx, p)
	}
	if err := p.Validate(false); err != nil {
		return fmt.Errorf("releasing scheduler lease: %w", err)
	}
	epochs := r.leases.forget(p.Owner, p.Epoch)
	if epochs == nil {
		return r.control.SchedulerLeaseRelease(ctx, p)
	}
	return r.releaseLeases(ctx, p.Owner, epochs)
}

// releaseLeases ends owner's lease in the first len(epochs) stores, those with
// an epoch.
func (r *router) releaseLeases(ctx context.Context, owner string, epochs []int64) error {
	var errs []error
	for i, e := range epochs {
		if e <= 0 {
			continue
		}
		errs = append(errs, r.stores[i].SchedulerLeaseRelease(ctx, &store.SchedulerLeaseParams{Owner: owner, Epoch: e}))
	}
	return errors.Join(errs...)
}

// ScheduleFire implements store.ScheduleStore. A fenced fire (Epoch above 0)
// in a routed namespace carries that store's epoch of the lease whose control
// epoch p names; ErrNotLeader when this router holds no such lease.
func (r *router) ScheduleFire(ctx context.Context, p *store.ScheduleFireParams) (*store.ScheduleFireResult, error) {
	st := r.storeFor(p.Namespace)
	i := r.index(st)
	if p.Epoch <= 0 || i == 0 {
		return st.ScheduleFire(ctx, p)
	}
	e, ok := r.leases.storeEpoch(p.Epoch, i)
	if !ok || e <= 0 {
		return nil, fmt.Errorf("firing schedule: %w: epoch %d", store.ErrNotLeader, p.Epoch)
	}
	q := *p
	q.Epoch = e
	return st.ScheduleFire(ctx, &q)
}
