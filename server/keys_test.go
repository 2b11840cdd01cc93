package server

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// flakyKeys fails its first fails SecretKey calls with err.
type flakyKeys struct {
	store.Store
	fails atomic.Int32
	calls atomic.Int32
	err   error
}

func (f *flakyKeys) SecretKey(ctx context.Context, p *store.SecretKeyParams) ([]byte, error) {
	f.calls.Add(1)
	if f.fails.Add(-1) >= 0 {
		return nil, f.err
	}
	return f.Store.SecretKey(ctx, p)
}

// A server starting while its store cannot take the key read for a moment
// (a JetStream cluster's writer changing) tries again and starts; one whose
// store refuses it for good, or for longer than keysPatience, does not.
func TestLoadKeysTriesAgain(t *testing.T) {
	st, err := trellis.OpenStore(context.Background(), storesqlite.URL(filepath.Join(t.TempDir(), "trellis.db")), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	start := func(fails int32, err error) (*flakyKeys, error) {
		fk := &flakyKeys{Store: st, err: err}
		fk.fails.Store(fails)
		srv, nerr := New(context.Background(), Config{Backend: fk, Listen: "127.0.0.1:0", Authenticator: testTokens()})
		if nerr == nil {
			_ = srv.Shutdown(context.Background())
		}
		return fk, nerr
	}
	passing := errors.New("forwarding SecretKey: outcome unknown: the write may have been applied")

	fk, err := start(3, passing)
	if err != nil || fk.calls.Load() != 4 {
		t.Fatalf("three failures then the key: New = %v after %d calls, want a server after 4", err, fk.calls.Load())
	}

	fk, err = start(3, store.ErrClosed)
	if !errors.Is(err, store.ErrClosed) || fk.calls.Load() != 1 {
		t.Fatalf("a closed store: New = %v after %d calls, want ErrClosed after 1", err, fk.calls.Load())
	}

	defer func(d time.Duration) { keysPatience = d }(keysPatience)
	keysPatience = 500 * time.Millisecond
	fk, err = start(1000, passing)
	if err == nil || !strings.Contains(err.Error(), "outcome unknown") || fk.calls.Load() < 2 {
		t.Fatalf("failing for longer than keysPatience: New = %v after %d calls, want the store's error after more than one", err, fk.calls.Load())
	}
}
