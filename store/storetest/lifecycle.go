package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// The store's lifecycle and its callers' contexts: what every driver does
// whatever its transport (store.AdminStore.Close, and a context that ends
// before or while a call waits).
var lifecycleCases = []testCase{
	{"CloseIdempotentThenErrClosed", lifecycleCloseIdempotent},
	{"CallerContextCancelled", lifecycleContextCancelled},
	{"CloseUnderLoad", lifecycleCloseUnderLoad},
}

// Close may be called again, and every call after it fails with ErrClosed:
// writes, reads, lists, and a driver's Migrate.
func lifecycleCloseIdempotent(t *testing.T, e *env) {
	r := e.create()
	for i := range 2 {
		if err := e.st.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	_, err := e.st.RunCreate(e.ctx, e.params())
	wantErr(t, "RunCreate after Close", err, store.ErrClosed)
	_, err = e.st.RunGet(e.ctx, &store.RunGetParams{Namespace: ns, Ref: r.ID})
	wantErr(t, "RunGet after Close", err, store.ErrClosed)
	_, err = e.st.RunList(e.ctx, &store.RunListParams{Namespace: ns})
	wantErr(t, "RunList after Close", err, store.ErrClosed)
	_, err = e.st.RunsClaim(e.ctx, claimParams())
	wantErr(t, "RunsClaim after Close", err, store.ErrClosed)
	if m, ok := e.st.(interface{ Migrate(context.Context) error }); ok {
		wantErr(t, "Migrate after Close", m.Migrate(e.ctx), store.ErrClosed)
	}
}

// A call whose context has ended fails with the context's error and writes
// nothing; one whose deadline passes while it waits returns promptly, with
// that error or having done its work.
func lifecycleContextCancelled(t *testing.T, e *env) {
	ctx, cancel := context.WithCancel(e.ctx)
	cancel()
	p := e.params()
	_, err := e.st.RunCreate(ctx, p)
	wantErr(t, "RunCreate with a cancelled context", err, context.Canceled)
	_, err = e.st.RunGet(e.ctx, &store.RunGetParams{Namespace: ns, Ref: p.ID})
	wantErr(t, "RunGet of the run a cancelled RunCreate was asked for", err, store.ErrRunNotFound)

	ctx, cancel = context.WithTimeout(e.ctx, time.Nanosecond)
	defer cancel()
	p = e.params()
	start := time.Now()
	_, err = e.st.RunCreate(ctx, p)
	if took := time.Since(start); took > signalTimeout {
		t.Fatalf("RunCreate with a deadline passed took %v", took)
	}
	switch {
	case err == nil:
		e.get(p.ID) // done before the deadline was seen: the run exists
	case !errors.Is(err, context.DeadlineExceeded):
		t.Fatalf("RunCreate with a short deadline: %v, want nil or %v", err, context.DeadlineExceeded)
	}
}

// Close while writes are under way: each of them either succeeds or fails with
// ErrClosed, and none hangs.
func lifecycleCloseUnderLoad(t *testing.T, e *env) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, 50)
	for range 50 {
		p := e.params()
		wg.Go(func() {
			<-start
			_, err := e.st.RunCreate(e.ctx, p)
			errs <- err
		})
	}
	close(start)
	if err := e.st.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil && !errors.Is(err, store.ErrClosed) {
			t.Errorf("RunCreate during Close: %v, want success or %v", err, store.ErrClosed)
		}
	}
}
