package trellis_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/core"
	"github.com/trellis-dev/trellis/internal/idemkey"
	"github.com/trellis-dev/trellis/store"
)

// A server's core serves every namespace from one store: the clients it makes
// for requests are of the namespace asked for, carry the request's
// idempotency key explicitly (the change and the key commit together), and
// share one results watcher per namespace for their waits.
func TestServerCore(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("core-echo", func(wc *trellis.Context, s string) (string, error) { return s, nil })
	url := storeURL(t)
	st := openStore(t, url)
	k, err := core.Open(core.Config{Store: st, MaxPayloadBytes: 1 << 20, RetentionInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	// Workers of two namespaces on the same store run the runs.
	for _, ns := range []string{"alpha", "beta"} {
		w := open(t, url, func(c *trellis.Config) { c.Namespace = ns })
		register(t, w, wf)
	}
	runs := map[string]*trellis.Run{}
	for _, ns := range []string{"alpha", "beta"} {
		c := k.Client(ns, core.Calls{}).(*trellis.Client)
		run, err := c.StartRaw(ctx, wf.Name(), []byte(`"`+ns+`"`), trellis.StartOptions{ID: "same-id"})
		if err != nil {
			t.Fatalf("start in %s: %v", ns, err)
		}
		if run.Namespace != ns {
			t.Fatalf("run started in %q, want %q", run.Namespace, ns)
		}
		runs[ns] = run
	}
	for ns, run := range runs {
		// A client made for another request waits in the same namespace.
		ended, err := k.Client(ns, core.Calls{}).(*trellis.Client).Wait(ctx, run.ID)
		if err != nil || string(ended.Output) != `"`+ns+`"` {
			t.Fatalf("wait in %s: %v, output %s", ns, err, ended.Output)
		}
		if _, err := k.Client("gamma", core.Calls{}).(*trellis.Client).Get(ctx, run.ID); !errors.Is(err, trellis.ErrRunNotFound) {
			t.Fatalf("run of %s read from namespace gamma: %v", ns, err)
		}
	}

	// The idempotency key is the request's, passed with its client.
	rendered := 0
	req := &idemkey.Request{Key: "key-1", Fingerprint: []byte("fp-1"), Render: func(v any) (int, []byte, error) {
		rendered++
		b, err := json.Marshal(v)
		return 201, b, err
	}}
	c := k.Client("alpha", core.Calls{Idempotency: req}).(*trellis.Client)
	run, err := c.StartRaw(ctx, wf.Name(), []byte(`"keyed"`), trellis.StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e, err := st.IdempotencyGet(ctx, &store.IdempotencyGetParams{Namespace: "alpha", Key: "key-1"})
	if err != nil {
		t.Fatalf("the start did not record its key: %v", err)
	}
	var answered trellis.Run
	if err := json.Unmarshal(e.Body, &answered); err != nil || answered.ID != run.ID || e.Status != 201 || rendered == 0 {
		t.Fatalf("recorded response %d %s (rendered %d times), want the run %s", e.Status, e.Body, rendered, run.ID)
	}
	// A client without the key records none.
	if _, err := k.Client("alpha", core.Calls{}).(*trellis.Client).StartRaw(ctx, wf.Name(), []byte(`"plain"`), trellis.StartOptions{}); err != nil {
		t.Fatal(err)
	}

	k.Close()
	if _, err := k.Client("alpha", core.Calls{}).(*trellis.Client).Wait(context.Background(), run.ID); !errors.Is(err, trellis.ErrClosed) {
		t.Fatalf("wait on a closed core: %v, want ErrClosed", err)
	}
}
