package storeremote_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/server"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storeremote"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// countingTransport counts the Checkpoint calls that reach the wire.
type countingTransport struct {
	calls atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/Checkpoint") {
		c.calls.Add(1)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// Concurrent checkpoints share calls on the wire, and each is still fenced and
// answered on its own: in the same batches as valid ones, a checkpoint with a
// stale token gets ErrLeaseLost and writes nothing.
func TestCheckpointsBatchedOnTheWire(t *testing.T) {
	ctx := t.Context()
	tr := &countingTransport{}
	st, rs := sqliteServer(t, tr)
	const n = 200
	claimed := createClaimed(t, st, rs, n)
	errs := checkpointAll(ctx, rs, claimed, func(i int, p *store.CheckpointParams) {
		if i%10 == 0 {
			p.Lease.Token++ // stale (and so not the token its secret was issued for)
		}
		p.Ops = []*store.Op{{Position: 0, Kind: store.OpStep, Name: "s", Done: true, Attempts: 1, Result: []byte(`1`)}}
	})
	for i, cr := range claimed {
		run, err := st.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: cr.Run.ID})
		if err != nil {
			t.Fatal(err)
		}
		if i%10 == 0 {
			if !errors.Is(errs[i], store.ErrLeaseLost) || run.Status != store.StatusRunning {
				t.Errorf("stale checkpoint %d: %v, run %s", i, errs[i], run.Status)
			}
			continue
		}
		if errs[i] != nil || run.Status != store.StatusSucceeded {
			t.Errorf("checkpoint %d: %v, run %s", i, errs[i], run.Status)
		}
	}
	calls := tr.calls.Load()
	t.Logf("%d checkpoints in %d calls", n, calls)
	if calls >= n {
		t.Errorf("%d checkpoints took %d calls: not batched", n, calls)
	}
}

// createClaimed creates n runs of workflow "wf" in st and claims them through
// rs.
func createClaimed(t *testing.T, st store.Store, rs *storeremote.Store, n int) []*store.ClaimedRun {
	t.Helper()
	ctx := t.Context()
	for i := range n {
		id := fmt.Sprint("r", i)
		if _, err := st.RunCreate(ctx, &store.RunCreateParams{Namespace: "default", ID: id, WorkflowID: id, Workflow: "wf", Queue: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := rs.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "default", Workflows: []string{"wf"}, Worker: "w", Max: n, LeaseDuration: time.Minute})
	if err != nil || len(res.Runs) != n {
		t.Fatalf("claim: %d runs, %v", len(res.Runs), err)
	}
	return res.Runs
}

// checkpointAll ends each claimed run as succeeded through rs, each from a
// goroutine of its own, all at once, with the parameters edit changes (nil:
// none), and returns their errors.
func checkpointAll(ctx context.Context, rs *storeremote.Store, claimed []*store.ClaimedRun, edit func(i int, p *store.CheckpointParams)) []error {
	var wg sync.WaitGroup
	errs := make([]error, len(claimed))
	for i, cr := range claimed {
		p := &store.CheckpointParams{Lease: cr.Lease(), Status: store.StatusSucceeded, Output: []byte(`1`)}
		if edit != nil {
			edit(i, p)
		}
		wg.Go(func() { _, errs[i] = rs.Checkpoint(ctx, p) })
	}
	wg.Wait()
	return errs
}

// sqliteServer starts an insecure server on a fresh SQLite store and returns the
// store and a remote store of the server whose calls go through transport;
// cleanup stops both.
func sqliteServer(t *testing.T, transport http.RoundTripper) (store.Store, *storeremote.Store) {
	t.Helper()
	st, err := storesqlite.Open(t.Context(), storesqlite.Config{Path: filepath.Join(t.TempDir(), "t.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	srv, err := server.New(t.Context(), server.Config{Backend: st, Listen: "127.0.0.1:0", Insecure: true, IdempotencyPurgeInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	rs, err := storeremote.New(storeremote.Config{URL: "http://" + srv.Addr().String(), HTTPClient: &http.Client{Transport: transport}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rs.Close() })
	return st, rs
}

// slowTransport holds every Checkpoint call on the wire for a while and keeps
// the most it saw in flight at once.
type slowTransport struct {
	mu            sync.Mutex
	inFlight, max int
}

func (s *slowTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if !strings.HasSuffix(r.URL.Path, "/Checkpoint") {
		return http.DefaultTransport.RoundTrip(r)
	}
	s.mu.Lock()
	s.inFlight++
	s.max = max(s.max, s.inFlight)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inFlight--
		s.mu.Unlock()
	}()
	time.Sleep(20 * time.Millisecond)
	return http.DefaultTransport.RoundTrip(r)
}

// A store has two Checkpoint calls on the wire at most: the checkpoints made
// while both are in flight wait for the next batch, and every one is answered.
func TestTwoCheckpointBatchesInFlight(t *testing.T) {
	ctx := t.Context()
	tr := &slowTransport{}
	st, rs := sqliteServer(t, tr)
	errs := checkpointAll(ctx, rs, createClaimed(t, st, rs, 100), nil)
	for i, err := range errs {
		if err != nil {
			t.Errorf("checkpoint %d: %v", i, err)
		}
	}
	if tr.max != 2 {
		t.Errorf("%d Checkpoint calls in flight at most, want 2", tr.max)
	}
}
