package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
)

// heldReads holds every read of one run (a RunsGet naming it, as the results
// watcher reads) while hold is set, until release is closed.
type heldReads struct {
	store.Store
	run   atomic.Pointer[string]
	hold  atomic.Bool
	reads atomic.Int32 // the reads of run
	// unheld counts the reads of run in flight that began before hold was
	// set: one may see the run end if the store answers it late.
	unheld  atomic.Int32
	release chan struct{}
}

func (s *heldReads) RunsGet(ctx context.Context, p *store.RunsGetParams) ([]*store.Run, error) {
	if id := s.run.Load(); id != nil && slices.Contains(p.IDs, *id) {
		s.reads.Add(1)
		s.unheld.Add(1) // before hold is looked at: the test waits for no unheld read after setting it
		if !s.hold.Load() {
			defer s.unheld.Add(-1)
		} else {
			s.unheld.Add(-1)
			select {
			case <-s.release:
			case <-ctx.Done():
			}
		}
	}
	return s.Store.RunsGet(ctx, p)
}

// WatchRuns and ForeignCommitMark are the store's: the results watcher follows
// the store's reports of changed runs through them, as it would without the
// wrapper.
func (s *heldReads) WatchRuns(ns string) (store.RunFeed, bool) {
	return s.Store.(store.RunWatcher).WatchRuns(ns)
}

func (s *heldReads) ForeignCommitMark(ctx context.Context) (int64, error) {
	if fc, ok := s.Store.(store.ForeignCommits); ok {
		return fc.ForeignCommitMark(ctx)
	}
	return 0, nil // Postgres: its feed carries every commit, and the watcher does not poll
}

// Checkpoint answers a checkpoint that ends the run 200 ms after the store
// wrote it, once hold is set: time enough for the results watcher to read the
// run on the store's report of its change, were it to read it.
func (s *heldReads) Checkpoint(ctx context.Context, p *store.CheckpointParams) (*store.CheckpointResult, error) {
	res, err := s.Store.Checkpoint(ctx, p)
	if id := s.run.Load(); s.hold.Load() && id != nil && p.Lease.RunID == *id && p.Status.Terminal() {
		time.Sleep(200 * time.Millisecond)
	}
	return res, err
}

// serveOn starts a server of cfg on a loopback port, with the test tokens,
// and returns its base URL and the function that shuts it down (before its
// store is closed).
func serveOn(t *testing.T, cfg Config) (base string, shutdown func()) {
	t.Helper()
	cfg.Listen, cfg.Authenticator = "127.0.0.1:0", testTokens()
	srv, err := New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	return "http://" + srv.Addr().String(), func() { srv.Shutdown(context.Background()) }
}

// workerOn starts a remote worker of the server at base serving wfs, with the
// admin token, and returns it and the function that closes it (before the
// server shuts down).
func workerOn(t *testing.T, base string, wfs ...trellis.Registrable) (*trellis.Worker, func()) {
	t.Helper()
	w, err := trellis.NewWorker(t.Context(), trellis.Config{Server: base, Token: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(t.Context(), wfs...); err != nil {
		w.Client().Close()
		t.Fatal(err)
	}
	return w, func() { w.Client().Close() }
}

// TestEndedRunAnswersWithoutARead: a run a remote worker ends through the
// server answers the result long polls waiting for it here with the run as the
// checkpoint left it (store.FinalRun), without the results watcher's read of
// it (none is made: the store's report of the change comes while the server
// writes the checkpoint, and is left to the hand-over), and that answer is the
// run a read gives afterwards, field for field. The server's metrics count the
// run's end before the answer.
func TestEndedRunAnswersWithoutARead(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			st, err := trellis.OpenStore(t.Context(), url(t), time.Now)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			rec := &heldReads{Store: st, release: make(chan struct{})}
			released := false
			defer func() {
				if !released {
					close(rec.release)
				}
			}()
			m := trellis.NewMetrics()
			base, shutdown := serveOn(t, Config{Backend: rec, MaxWait: time.Minute, Metrics: m})
			defer shutdown()
			gate := make(chan struct{})
			wf := trellis.NewWorkflow("handed-over", func(wc *trellis.Context, in string) (string, error) {
				return trellis.Step(wc, "wait", func(ctx context.Context) (string, error) {
					select {
					case <-gate:
						return "done: " + in, nil
					case <-ctx.Done():
						return "", ctx.Err()
					}
				})
			})
			// Started before any worker serves it: the long poll's read as it
			// registers (the run is not one this server pushed yet) says it
			// waits; then the worker claims it.
			c, err := trellis.Open(t.Context(), trellis.Config{Server: base, Token: "admin"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			h, err := trellis.Start(t.Context(), c, wf, "x")
			if err != nil {
				t.Fatal(err)
			}
			id := h.RunID()
			rec.run.Store(&id)
			get := func(path string) (int, map[string]any) {
				req, _ := http.NewRequestWithContext(t.Context(), "GET", base+"/v1/namespaces/default/runs/"+id+path, nil)
				req.Header.Set("Authorization", "Bearer admin")
				res, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return 0, nil
				}
				defer res.Body.Close()
				b, _ := io.ReadAll(res.Body)
				var m map[string]any
				if err := json.Unmarshal(b, &m); err != nil {
					t.Errorf("GET %s: %d %s", path, res.StatusCode, b)
				}
				return res.StatusCode, m
			}
			type answer struct {
				status int
				run    map[string]any
			}
			answered := make(chan answer, 1)
			go func() {
				status, run := get("/result?wait=50s")
				answered <- answer{status, run}
			}()
			for deadline := time.Now().Add(10 * time.Second); rec.reads.Load() == 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("the long poll never read its run")
				}
			}
			_, closeWorker := workerOn(t, base, wf)
			defer closeWorker()
			rec.hold.Store(true) // from here every read of the run waits for release
			// A read begun before could be answered after the run ends (on
			// a loaded machine, on Postgres): let those finish first.
			for deadline := time.Now().Add(10 * time.Second); rec.unheld.Load() > 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("a read of the run begun before the hold did not end")
				}
			}
			before := rec.reads.Load()
			close(gate)
			var got answer
			select {
			case got = <-answered:
			case <-time.After(30 * time.Second):
				t.Fatalf("no answer 30s after the run ended (%d reads of it): the long poll waits for a read", rec.reads.Load())
			}
			if got.status != 200 || got.run["status"] != "succeeded" || got.run["output"] != "done: x" {
				t.Fatalf("result: %d %v", got.status, got.run)
			}
			// Counted before it was handed over: a client that saw the run
			// end finds it in the metrics.
			if n := counterValue(t, m, "trellis_runs_ended_total", "workflow", "handed-over", "status", "succeeded"); n != 1 {
				t.Errorf("trellis_runs_ended_total of the run when its result answered: %v, want 1", n)
			}
			// The store's report of the run's change came while the
			// checkpoint was written: the watcher left it to the hand-over.
			if n := rec.reads.Load() - before; n != 0 {
				t.Fatalf("the watcher read the run %d times after it ended, as well as getting it handed over", n)
			}
			rec.hold.Store(false)
			close(rec.release)
			released = true
			if status, read := get(""); status != 200 || !reflect.DeepEqual(read, got.run) {
				t.Fatalf("the run handed over:\n%v\nthe run read afterwards (%d):\n%v", got.run, status, read)
			}
		})
	}
}
