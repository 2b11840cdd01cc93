package storeroute

import (
	"cmp"
	"context"
	"fmt"
	"slices"

	"github.com/trellis-dev/trellis/store"
)

// The calls that span namespaces: each goes to every store, which answers for
// the namespaces it holds, and the answers are merged.

// NamespaceList implements store.QueueStore: every store's namespaces that it
// holds, by name.
func (r *router) NamespaceList(ctx context.Context) ([]*store.Namespace, error) {
	out := []*store.Namespace{}
	for _, st := range r.stores {
		list, err := st.NamespaceList(ctx)
		if err != nil {
			return nil, err
		}
		for _, ns := range list {
			if r.holds(st, ns.Name) {
				out = append(out, ns)
			}
		}
	}
	slices.SortFunc(out, func(a, b *store.Namespace) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// RunNamespaces implements store.RunDeleter: the namespaces with runs, sorted.
func (r *router) RunNamespaces(ctx context.Context) ([]string, error) {
	var out []string
	for _, st := range r.stores {
		list, err := st.RunNamespaces(ctx)
		if err != nil {
			return nil, err
		}
		for _, ns := range list {
			if r.holds(st, ns) {
				out = append(out, ns)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// ScheduleList implements store.ScheduleStore: a namespace's schedules from
// its store; without a namespace, every store's, by namespace and name.
func (r *router) ScheduleList(ctx context.Context, p *store.ScheduleListParams) ([]*store.Schedule, error) {
	if p.Namespace != "" {
		return r.storeFor(p.Namespace).ScheduleList(ctx, p)
	}
	out := []*store.Schedule{}
	for _, st := range r.stores {
		list, err := st.ScheduleList(ctx, p)
		if err != nil {
			return nil, err
		}
		for _, sc := range list {
			if r.holds(st, sc.Namespace) {
				out = append(out, sc)
			}
		}
	}
	slices.SortFunc(out, func(a, b *store.Schedule) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	return out, nil
}

// defaultIdempotencyPurge is IdempotencyPurgeParams' Limit when 0.
const defaultIdempotencyPurge = 1000

// IdempotencyPurge implements store.IdempotencyStore: every store purges its
// expired keys, up to what the stores before it left of Limit, so that one
// call deletes at most Limit and returns fewer only when none is left.
func (r *router) IdempotencyPurge(ctx context.Context, p *store.IdempotencyPurgeParams) (int, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = defaultIdempotencyPurge
	}
	total := 0
	for _, st := range r.stores {
		if total >= limit {
			break
		}
		n, err := st.IdempotencyPurge(ctx, &store.IdempotencyPurgeParams{Limit: limit - total})
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// LeasesExtend implements store.WorkerStore. Leases of one store go to it in
// one call; leases of several are split by store (each with its step) and the
// answers merged.
func (r *router) LeasesExtend(ctx context.Context, p *store.LeasesExtendParams) (*store.LeasesExtendResult, error) {
	groups := r.leaseGroups(p)
	if len(groups) <= 1 {
		st := r.control
		if len(p.Leases) > 0 {
			st = r.storeFor(p.Leases[0].Namespace)
		}
		return st.LeasesExtend(ctx, p)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("extending leases: %w", err)
	}
	out := &store.LeasesExtendResult{}
	for _, g := range groups {
		q := *p
		q.Leases, q.Steps = nil, nil
		for _, i := range g.leases {
			q.Leases = append(q.Leases, p.Leases[i])
			if len(p.Steps) > 0 {
				q.Steps = append(q.Steps, p.Steps[i])
			}
		}
		res, err := g.st.LeasesExtend(ctx, &q)
		if err != nil {
			return nil, err
		}
		out.Lost = append(out.Lost, res.Lost...)
		out.CancelRequested = append(out.CancelRequested, res.CancelRequested...)
	}
	return out, nil
}

// leaseGroup is the leases (by index) of p that one store holds.
type leaseGroup struct {
	st     store.Store
	leases []int
}

// leaseGroups splits p's leases by store, in the order of r.stores.
func (r *router) leaseGroups(p *store.LeasesExtendParams) []leaseGroup {
	var groups []leaseGroup
	for i, l := range p.Leases {
		st := r.storeFor(l.Namespace)
		j := slices.IndexFunc(groups, func(g leaseGroup) bool { return g.st == st })
		if j < 0 {
			groups = append(groups, leaseGroup{st: st})
			j = len(groups) - 1
		}
		groups[j].leases = append(groups[j].leases, i)
	}
	slices.SortFunc(groups, func(a, b leaseGroup) int { return cmp.Compare(r.index(a.st), r.index(b.st)) })
	return groups
}
