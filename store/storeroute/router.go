package storeroute

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/trellis-dev/trellis/store"
)

// router is the store.Store New returns; which optional interfaces the value
// New returns offers depends on its stores (optional.go).
type router struct {
	control store.Store
	// routes maps a routed namespace to its store.
	routes map[string]store.Store
	// stores are the distinct stores, the control store first, then the
	// routed ones in the order of their first namespace's name: the order in
	// which the scheduler lease is taken.
	stores []store.Store
	leases leaseTable
}

// New returns a store that keeps each namespace of routes in its store and
// everything else in control. A route's namespace must be a valid namespace
// name (store.ValidateNamespace: not the reserved system namespace) and its
// store not nil; several namespaces may share a store, and a route to control
// itself is the same as none. The router owns the stores: its Close closes
// them all.
func New(control store.Store, routes map[string]store.Store) (store.Store, error) {
	r, err := newRouter(control, routes)
	if err != nil {
		return nil, err
	}
	return r.withCapabilities(), nil
}

func newRouter(control store.Store, routes map[string]store.Store) (*router, error) {
	if control == nil {
		return nil, errors.New("storeroute: the control store is nil")
	}
	r := &router{control: control, routes: make(map[string]store.Store, len(routes)),
		stores: []store.Store{control}}
	for _, ns := range slices.Sorted(mapKeys(routes)) {
		st := routes[ns]
		if err := store.ValidateNamespace(ns); err != nil {
			return nil, fmt.Errorf("storeroute: route %q: %w", ns, err)
		}
		if st == nil {
			return nil, fmt.Errorf("storeroute: route %q: the store is nil", ns)
		}
		if st == control {
			continue
		}
		r.routes[ns] = st
		if !slices.Contains(r.stores, st) {
			r.stores = append(r.stores, st)
		}
	}
	r.leases.init(len(r.stores))
	return r, nil
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// storeFor returns the store that holds namespace ns: its route's, else the
// control store.
func (r *router) storeFor(ns string) store.Store {
	if st, ok := r.routes[ns]; ok {
		return st
	}
	return r.control
}

// index is the position of st in r.stores.
func (r *router) index(st store.Store) int { return slices.Index(r.stores, st) }

// holds reports whether st answers for namespace ns.
func (r *router) holds(st store.Store, ns string) bool { return r.storeFor(ns) == st }

// Close closes every store, the routed ones first. It returns their errors
// joined; the stores' own Close is idempotent, and so is the router's.
func (r *router) Close() error {
	var errs []error
	for i := len(r.stores) - 1; i >= 0; i-- {
		if err := r.stores[i].Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Ready reports whether every store answers and its schema is current: a
// store's own Ready when it has one, else a read of one run.
func (r *router) Ready(ctx context.Context) error {
	for _, st := range r.stores {
		var err error
		if rd, ok := st.(interface{ Ready(context.Context) error }); ok {
			err = rd.Ready(ctx)
		} else {
			_, err = st.RunList(ctx, &store.RunListParams{Namespace: store.DefaultNamespace, Limit: 1})
		}
		if err != nil {
			return fmt.Errorf("store %d of %d: %w", r.index(st)+1, len(r.stores), err)
		}
	}
	return nil
}

// topicNamespace is the namespace of a run's or its stream's topic; ok is false
// for any other topic.
func topicNamespace(topic string) (ns string, ok bool) {
	for _, prefix := range []string{"run:", "stream:"} {
		if rest, found := strings.CutPrefix(topic, prefix); found {
			ns, _, ok = strings.Cut(rest, "/")
			return ns, ok
		}
	}
	return "", false
}
