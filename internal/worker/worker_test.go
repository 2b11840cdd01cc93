package worker

import (
	"context"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
	"github.com/trellis-dev/trellis/store/storetest"
)

// watched is a real store that logs the worker's heartbeat calls.
type watched struct {
	store.Store
	mu      sync.Mutex
	beats   []store.WorkerHeartbeatParams
	extends []int // leases per LeasesExtend call
}

func (s *watched) WorkerHeartbeat(ctx context.Context, p *store.WorkerHeartbeatParams) error {
	err := s.Store.WorkerHeartbeat(ctx, p)
	if err == nil {
		s.mu.Lock()
		s.beats = append(s.beats, *p)
		s.mu.Unlock()
	}
	return err
}

func (s *watched) LeasesExtend(ctx context.Context, p *store.LeasesExtendParams) (*store.LeasesExtendResult, error) {
	s.mu.Lock()
	s.extends = append(s.extends, len(p.Leases))
	s.mu.Unlock()
	return s.Store.LeasesExtend(ctx, p)
}

func (s *watched) calls() (beats []store.WorkerHeartbeatParams, extends []int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.beats), slices.Clone(s.extends)
}

// blocker executes a run by announcing it and holding it until the worker stops.
type blocker struct{ started chan string }

func (b blocker) Execute(ctx context.Context, cr *store.ClaimedRun, _ *Control) {
	b.started <- cr.Run.ID
	<-ctx.Done()
}

type fixture struct {
	t    *testing.T
	st   *watched
	clk  *storetest.Clock
	exec blocker
	mu   sync.Mutex
	wfs  []string
}

func setup(t *testing.T) *fixture {
	t.Helper()
	clk := storetest.NewClock(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	s, err := storesqlite.Open(t.Context(), storesqlite.Config{Path: filepath.Join(t.TempDir(), "t.db"), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return &fixture{t: t, st: &watched{Store: s}, clk: clk, exec: blocker{started: make(chan string, 16)}}
}

func (f *fixture) setWorkflows(wfs ...string) {
	f.mu.Lock()
	f.wfs = wfs
	f.mu.Unlock()
}

func (f *fixture) workflows() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.wfs)
}

// newWorker returns a worker whose heartbeat ticker never fires during a test
// (the test calls heartbeat itself).
func (f *fixture) newWorker() *Worker {
	f.t.Helper()
	w, err := New(Config{Store: f.st, Namespace: "ns", Queues: []string{"q"}, Workflows: f.workflows,
		Name: "w-1", Version: "v-test", LeaseDuration: time.Hour, ShutdownGrace: time.Millisecond}, f.exec)
	if err != nil {
		f.t.Fatal(err)
	}
	return w
}

func (f *fixture) createRun(id, workflow string) {
	f.t.Helper()
	_, err := f.st.RunCreate(f.t.Context(), &store.RunCreateParams{Namespace: "ns", ID: id, WorkflowID: id,
		Workflow: workflow, Queue: "q"})
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) waitStarted(id string) {
	f.t.Helper()
	select {
	case got := <-f.exec.started:
		if got != id {
			f.t.Fatalf("executor got run %s, want %s", got, id)
		}
	case <-time.After(10 * time.Second):
		f.t.Fatalf("run %s was not claimed", id)
	}
}

func (f *fixture) record() *store.Worker {
	f.t.Helper()
	ws, err := f.st.WorkerList(f.t.Context(), &store.WorkerListParams{Namespace: "ns"})
	if err != nil {
		f.t.Fatal(err)
	}
	if len(ws) != 1 {
		f.t.Fatalf("worker records = %d, want 1", len(ws))
	}
	return ws[0]
}

func stop(t *testing.T, w *Worker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

// The worker registers before its first claim, rewrites its record before the
// first claim after its workflows change, refreshes it with one call per heartbeat
// tick whatever the number of runs, and removes it on Stop.
func TestWorkerRecord(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.setWorkflows("a")
	started := f.clk.Now()
	w := f.newWorker()
	w.Start()
	f.createRun("r-1", "a")
	f.waitStarted("r-1") // the record is written before the claim
	rec := f.record()
	if rec.Name != "w-1" || !slices.Equal(rec.Workflows, []string{"a"}) || !slices.Equal(rec.Queues, []string{"q"}) ||
		rec.Version != "v-test" || !rec.Live || !rec.StartedAt.Equal(started) {
		t.Fatalf("record = %+v", rec)
	}
	f.setWorkflows("b", "a")
	w.Wake()
	f.createRun("r-2", "b")
	f.waitStarted("r-2")
	if rec := f.record(); !slices.Equal(rec.Workflows, []string{"a", "b"}) {
		t.Fatalf("record after the workflows changed = %+v", rec)
	}
	beats, _ := f.st.calls()
	if len(beats) != 2 || !beats[0].Start || beats[1].Start || beats[0].TTL != time.Hour {
		t.Fatalf("heartbeats = %+v, want a start and an update, with the lease as TTL", beats)
	}

	now := f.clk.Advance(5 * time.Second)
	w.heartbeat()
	beats, extends := f.st.calls()
	if len(beats) != 3 || !slices.Equal(extends, []int{2}) {
		t.Fatalf("one tick with two runs made %d record writes (want 3 in all) and lease calls %v (want [2])", len(beats), extends)
	}
	if rec := f.record(); !rec.LastSeenAt.Equal(now) || !rec.StartedAt.Equal(started) {
		t.Fatalf("record after a heartbeat = %+v, want last seen %v", rec, now)
	}
	stop(t, w)
	ws, err := f.st.WorkerList(t.Context(), &store.WorkerListParams{Namespace: "ns"})
	if err != nil || len(ws) != 0 {
		t.Fatalf("records after Stop = %v, %v; want none", ws, err)
	}
}

// A worker without runs heartbeats its record too, and makes no lease call.
func TestWorkerWithoutRunsHeartbeats(t *testing.T) {
	t.Parallel()
	f := setup(t)
	w := f.newWorker()
	w.heartbeat()
	if rec := f.record(); len(rec.Workflows) != 0 || !rec.Live {
		t.Fatalf("record = %+v", rec)
	}
	if _, extends := f.st.calls(); len(extends) != 0 {
		t.Fatalf("lease calls without runs: %v", extends)
	}
	stop(t, w)
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	c := Config{}.withDefaults()
	if c.LeaseDuration != 10*time.Second || c.HeartbeatInterval != c.LeaseDuration/3 || c.PollInterval != time.Second {
		t.Fatalf("defaults: lease %v, heartbeat %v, poll %v", c.LeaseDuration, c.HeartbeatInterval, c.PollInterval)
	}
}
