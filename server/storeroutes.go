package server

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storeroute"
)

// validateRoutes checks Config.Routes: each a valid namespace name but the
// default namespace (whose store is Config.Store: the control store) and the
// system namespace, with a store URL.
func validateRoutes(routes map[string]string) error {
	for _, ns := range slices.Sorted(maps.Keys(routes)) {
		switch {
		case ns == store.DefaultNamespace:
			return fmt.Errorf("server config: Routes: namespace %q is the control store's: set Store (--store) instead", ns)
		case ns == auth.SystemNamespace:
			return fmt.Errorf("server config: Routes: namespace %q cannot be routed", ns)
		case routes[ns] == "":
			return fmt.Errorf("server config: Routes: namespace %q has no store URL", ns)
		}
		if err := store.ValidateNamespace(ns); err != nil {
			return fmt.Errorf("server config: Routes: %w", err)
		}
		if err := knownDriver(routes[ns]); err != nil {
			return fmt.Errorf("server config: Routes: route %s: %w", ns, err)
		}
	}
	return nil
}

// knownDriver refuses a URL whose scheme no imported driver registered, before
// any store is opened (so that a mistyped route creates no control store).
func knownDriver(url string) error {
	scheme, _, ok := strings.Cut(url, ":")
	if ok && slices.Contains(store.Drivers(), strings.ToLower(scheme)) {
		return nil
	}
	// store.Open refuses such a URL before it calls any driver, with the
	// error that names the driver's import.
	st, err := store.Open(context.Background(), url, store.OpenOptions{})
	if err == nil { // a driver registered meanwhile
		return st.Close()
	}
	return err
}

// routeStores opens the stores of cfg.Routes (one per distinct URL) and
// returns a router over control and them, and the stores it opened. On error
// it closes what it opened (never control).
func routeStores(ctx context.Context, cfg Config, control store.Store) (store.Store, []store.Store, error) {
	byURL := make(map[string]store.Store)
	var opened []store.Store
	routes := make(map[string]store.Store, len(cfg.Routes))
	fail := func(err error) (store.Store, []store.Store, error) {
		for _, st := range opened {
			_ = st.Close()
		}
		return nil, nil, err
	}
	for _, ns := range slices.Sorted(maps.Keys(cfg.Routes)) {
		url := cfg.Routes[ns]
		st := byURL[url]
		if st == nil {
			var err error
			if st, err = trellis.OpenStoreWith(ctx, url, store.OpenOptions{Now: cfg.Clock.Now, Logger: cfg.Logger.With("route", ns)}); err != nil {
				return fail(fmt.Errorf("starting server: route %s: %w", ns, err))
			}
			byURL[url] = st
			opened = append(opened, st)
		}
		routes[ns] = st
	}
	r, err := storeroute.New(control, routes)
	if err != nil {
		return fail(fmt.Errorf("starting server: %w", err))
	}
	return r, opened, nil
}

// useRoutes puts the router of cfg.Routes in place of s.store. The server
// closes what it opened: the router (every store) when it opened the control
// store, else the routed stores alone (Backend is the caller's).
func (s *Server) useRoutes(ctx context.Context) error {
	if len(s.cfg.Routes) == 0 {
		return nil
	}
	r, opened, err := routeStores(ctx, s.cfg, s.store)
	if err != nil {
		return err
	}
	s.store = r
	if !s.ownsStore {
		s.routed = opened
	}
	return nil
}

// closeStores closes the stores the server opened.
func (s *Server) closeStores() error {
	var errs []error
	if s.ownsStore {
		errs = append(errs, s.store.Close())
	}
	for _, st := range s.routed {
		errs = append(errs, st.Close())
	}
	return errors.Join(errs...)
}
