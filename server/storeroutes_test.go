package server

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// TestRoutesRefused: a bad route is a clear error of New, and no store is
// opened (no route file is made, the control store is not opened).
func TestRoutesRefused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	route := storesqlite.URL(filepath.Join(dir, "orders.db"))
	for name, c := range map[string]struct {
		routes map[string]string
		want   string
	}{
		"default":   {map[string]string{"default": route}, `namespace "default" is the control store's`},
		"system":    {map[string]string{"__system__": route}, "cannot be routed"},
		"no URL":    {map[string]string{"orders": ""}, `namespace "orders" has no store URL`},
		"bad name":  {map[string]string{"a b": route}, "a b"},
		"no driver": {map[string]string{"orders": "mysql://h/db"}, `route orders: no store driver for "mysql://"`},
	} {
		t.Run(name, func(t *testing.T) {
			srv, err := New(context.Background(), Config{Store: storesqlite.URL(filepath.Join(dir, "control.db")),
				Routes: c.routes, Insecure: true, Listen: "127.0.0.1:0"})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				if srv != nil {
					_ = srv.Shutdown(context.Background())
				}
				t.Fatalf("New with routes %v: %v, want an error with %q", c.routes, err, c.want)
			}
		})
	}
	for _, f := range []string{"orders.db", "control.db"} {
		if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after refused routes: %v, want none", f, err)
		}
	}
}

// TestRoutesWithBackend: a server on a Backend routes a namespace to a store
// it opens: a run started in that namespace is in the routed file, not in
// the Backend; Shutdown closes the routed store (TestMain checks that no
// goroutine of it is left) and leaves the Backend open.
func TestRoutesWithBackend(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	backend, err := trellis.OpenStore(context.Background(), storesqlite.URL(filepath.Join(dir, "control.db")), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer backend.Close()
	ordersFile := filepath.Join(dir, "orders.db")
	srv, err := New(context.Background(), Config{Backend: backend, Routes: map[string]string{"orders": storesqlite.URL(ordersFile)},
		Insecure: true, Listen: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest("POST", "http://"+srv.Addr().String()+"/v1/namespaces/orders/runs",
		strings.NewReader(`{"workflow":"wf","id":"o1"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusCreated {
		t.Fatalf("start in orders: %d", res.StatusCode)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := backend.RunGet(ctx, &store.RunGetParams{Namespace: "orders", Ref: "o1"}); !errors.Is(err, store.ErrRunNotFound) {
		t.Errorf("the Backend after Shutdown: run o1 of orders: %v, want ErrRunNotFound (and the store open)", err)
	}
	orders, err := storesqlite.Open(ctx, storesqlite.Config{Path: ordersFile, NoMigrate: true})
	if err != nil {
		t.Fatal(err)
	}
	defer orders.Close()
	if _, err := orders.RunGet(ctx, &store.RunGetParams{Namespace: "orders", Ref: "o1"}); err != nil {
		t.Errorf("the routed file: run o1 of orders: %v", err)
	}
}
