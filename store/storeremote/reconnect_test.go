package storeremote_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/server"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storeremote"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// A subscription outlives a restart of the server: its stream ends with the
// server's shutdown, it reconnects with backoff to the server started again on
// the same address, signals once reconnected, then signals changes as before.
func TestSubscriptionReconnects(t *testing.T) {
	ctx := t.Context()
	st, err := storesqlite.Open(ctx, storesqlite.Config{Path: filepath.Join(t.TempDir(), "t.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	serve := func(listen string) *server.Server {
		srv, err := server.New(ctx, server.Config{Backend: st, Listen: listen, Insecure: true, IdempotencyPurgeInterval: -1})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		return srv
	}
	srv := serve("127.0.0.1:0")
	addr := srv.Addr().String()
	rs, err := storeremote.New(storeremote.Config{URL: "http://" + addr, MaxBackoff: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	ch, unsubscribe, err := rs.Subscribe(ctx, store.TopicReady)
	if err != nil {
		t.Fatal(err)
	}
	defer unsubscribe()
	create := func(id string) {
		if _, err := st.RunCreate(ctx, &store.RunCreateParams{Namespace: "default", ID: id, WorkflowID: id, Workflow: "wf", Queue: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(what string) {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("no signal %s", what)
		}
	}
	create("r1")
	expect("before the restart")
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	srv2 := serve(addr)
	defer srv2.Shutdown(context.Background())
	expect("on reconnecting")
	create("r2")
	expect("after the restart")
}
