package engine

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/clock"
	"github.com/trellis-dev/trellis/internal/worker"
	"github.com/trellis-dev/trellis/store"
)

// memStore is a test double of the engine's Store for these unit tests only: it
// keeps the checkpoints it is given. Storage behaviour is tested on the real
// drivers (storetest and the root package's tests).
type memStore struct {
	mu    sync.Mutex
	saved []*store.CheckpointParams
	fail  error // returned by every Checkpoint when set
	clk   clock.Clock
}

func (m *memStore) Checkpoint(_ context.Context, p *store.CheckpointParams) (*store.CheckpointResult, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return nil, m.fail
	}
	m.saved = append(m.saved, p)
	return &store.CheckpointResult{At: m.clk.Now()}, nil
}

func (m *memStore) LeaseRelease(context.Context, *store.LeaseReleaseParams) error { return nil }

func (m *memStore) RunChildren(context.Context, *store.RunChildrenParams) ([]*store.Run, error) {
	return nil, nil
}

// last returns the last checkpoint saved.
func (m *memStore) last(t *testing.T) *store.CheckpointParams {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.saved) == 0 {
		t.Fatal("nothing checkpointed")
	}
	return m.saved[len(m.saved)-1]
}

// ops returns every op checkpointed, in order.
func (m *memStore) ops() []*store.Op {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ops []*store.Op
	for _, p := range m.saved {
		ops = append(ops, p.Ops...)
	}
	return ops
}

type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)   { return json.Marshal(v) }
func (jsonCodec) Unmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
func noRetry() StepOptions                        { return StepOptions{MaxAttempts: 1, Backoff: fixed(0)} }
func (f fixed) Delay(int) time.Duration           { return time.Duration(f) }
func stepOf(v any) func(context.Context) (any, error) {
	return func(context.Context) (any, error) { return v, nil }
}

type fixed time.Duration

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// setup returns an engine running the workflow fn on a memStore with a fake clock.
func setup(t *testing.T, fn func(rs *RunState) (any, error)) (*Engine, *memStore, *clock.Fake) {
	t.Helper()
	clk := clock.NewFake(epoch)
	ms := &memStore{clk: clk}
	def := &Definition{Name: "wf", Run: func(rs *RunState, _ []byte) ([]byte, error) {
		out, err := fn(rs)
		if err != nil {
			return nil, err
		}
		return json.Marshal(out)
	}}
	e, err := New(Config{Store: ms, Codec: jsonCodec{}, Clock: clk, MaxPayloadBytes: 1 << 20,
		MaxInlineBackoff: 2 * time.Second, CheckpointTimeout: time.Minute,
		Lookup: func(name string) (*Definition, bool) { return def, name == "wf" }})
	if err != nil {
		t.Fatal(err)
	}
	return e, ms, clk
}

func claimed(history ...*store.Op) *store.ClaimedRun {
	return &store.ClaimedRun{Run: &store.Run{Namespace: "default", ID: "r1", Workflow: "wf", Status: store.StatusRunning},
		LeaseToken: 1, History: history}
}

func doneStep(pos int, name string, result string) *store.Op {
	at := epoch
	return &store.Op{Position: pos, Kind: store.OpStep, Name: name, Done: true, Result: []byte(result), Attempts: 1, StartedAt: at, FinishedAt: &at}
}

func execute(e *Engine, ctx context.Context, cr *store.ClaimedRun) {
	e.Execute(ctx, cr, worker.NewControl(store.Lease{Namespace: cr.Run.Namespace, RunID: cr.Run.ID, Token: cr.LeaseToken}))
}

func TestReplayReturnsRecordedResultsWithoutRunningSteps(t *testing.T) {
	t.Parallel()
	ran := 0
	e, ms, _ := setup(t, func(rs *RunState) (any, error) {
		a := rs.Step("a", func(context.Context) (any, error) { ran++; return 1, nil }, noRetry(), false)
		b := rs.Step("b", func(context.Context) (any, error) { ran++; return 2, nil }, noRetry(), false)
		var x, y int
		rs.DecodeResult(a, &x)
		rs.DecodeResult(b, &y)
		return x + y, nil
	})
	execute(e, context.Background(), claimed(doneStep(0, "a", "40")))
	if ran != 1 {
		t.Fatalf("steps ran %d times, want 1 (only b)", ran)
	}
	p := ms.last(t)
	if p.Status != store.StatusSucceeded || string(p.Output) != "42" {
		t.Fatalf("outcome %s %s", p.Status, p.Output)
	}
	if ops := ms.ops(); len(ops) != 1 || ops[0].Position != 1 || ops[0].Name != "b" {
		t.Fatalf("recorded ops %+v, want only b at 1", ops)
	}
}

func TestNonDeterminismBlocksWithPositionRecordedAndRequested(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		history []*store.Op
		want    NonDeterminismError
	}{
		{"other name", []*store.Op{doneStep(0, "a", "1"), doneStep(1, "x", "1")},
			NonDeterminismError{Position: 1, Recorded: `step "x"`, Requested: `step "b"`}},
		{"other kind", []*store.Op{{Position: 0, Kind: store.OpTimer, Result: []byte(`"2026-01-01T00:00:00Z"`)}},
			NonDeterminismError{Position: 0, Recorded: "timer", Requested: `step "a"`}},
		{"result of another type", []*store.Op{doneStep(0, "a", `"text"`)},
			NonDeterminismError{Position: 0, Recorded: `step "a" with a result of another type`, Requested: `step "a" returning int`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			after := false
			e, ms, _ := setup(t, func(rs *RunState) (any, error) {
				var n int
				rs.DecodeResult(rs.Step("a", stepOf(1), noRetry(), false), &n)
				rs.Step("b", stepOf(2), noRetry(), false)
				after = true
				return n, nil
			})
			execute(e, context.Background(), claimed(tc.history...))
			p := ms.last(t)
			if p.Status != store.StatusBlocked || p.Error == nil || p.Error.Type != TypeNonDeterminism {
				t.Fatalf("saved %s %+v, want blocked", p.Status, p.Error)
			}
			if want := tc.want.Error(); p.Error.Message != want {
				t.Fatalf("error %q, want %q", p.Error.Message, want)
			}
			if after {
				t.Fatal("the workflow went on after the divergence")
			}
		})
	}
}

func TestLongSleepSuspendsTheRun(t *testing.T) {
	t.Parallel()
	e, ms, _ := setup(t, func(rs *RunState) (any, error) {
		var tm Timer
		rs.NewTimer(&tm, func(now time.Time) time.Time { return now.Add(24 * time.Hour) })
		return nil, rs.Await(&tm, false)
	})
	execute(e, context.Background(), claimed())
	p := ms.last(t)
	if p.Status != store.StatusWaiting || p.WakeAt == nil || !p.WakeAt.Equal(epoch.Add(24*time.Hour)) {
		t.Fatalf("saved %s wake %v, want waiting until +24h", p.Status, p.WakeAt)
	}
	if len(p.Ops) != 1 || p.Ops[0].Kind != store.OpTimer || p.Ops[0].Done {
		t.Fatalf("ops %+v, want the pending timer", p.Ops)
	}
}

func TestShortSleepWaitsInPlaceOnTheClock(t *testing.T) {
	t.Parallel()
	e, ms, clk := setup(t, func(rs *RunState) (any, error) {
		var tm Timer
		rs.NewTimer(&tm, func(now time.Time) time.Time { return now.Add(time.Second) })
		return "woke", rs.Await(&tm, false)
	})
	added := clk.TimerAdded()
	done := make(chan struct{})
	go func() { defer close(done); execute(e, context.Background(), claimed()) }()
	<-added
	clk.Advance(time.Second)
	<-done
	if p := ms.last(t); p.Status != store.StatusSucceeded || string(p.Output) != `"woke"` {
		t.Fatalf("saved %s %s", p.Status, p.Output)
	}
}

func TestShutdownHandsTheRunBack(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	e, ms, _ := setup(t, func(rs *RunState) (any, error) {
		rs.Step("slow", func(ctx context.Context) (any, error) {
			close(started)
			<-ctx.Done()
			return nil, ctx.Err()
		}, noRetry(), false)
		return nil, errors.New("must not finish")
	})
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); execute(e, ctx, claimed()) }()
	<-started
	cancel(worker.ErrShutdown)
	<-done
	p := ms.last(t)
	if p.Status != store.StatusPending || len(p.Ops) != 0 {
		t.Fatalf("saved %s with %d ops, want pending with none", p.Status, len(p.Ops))
	}
}

func TestLeaseLossAbandonsTheRun(t *testing.T) {
	t.Parallel()
	started := make(chan struct{})
	e, ms, _ := setup(t, func(rs *RunState) (any, error) {
		rs.Step("slow", func(ctx context.Context) (any, error) {
			close(started)
			<-ctx.Done()
			return nil, ctx.Err()
		}, noRetry(), false)
		return nil, errors.New("must not finish")
	})
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); execute(e, ctx, claimed()) }()
	<-started
	cancel(store.ErrLeaseLost)
	<-done
	ms.mu.Lock()
	defer ms.mu.Unlock()
	if len(ms.saved) != 0 {
		t.Fatalf("an abandoned run wrote %d checkpoints (last %s)", len(ms.saved), ms.saved[len(ms.saved)-1].Status)
	}
}

func TestFailedCheckpointAbandonsTheRun(t *testing.T) {
	t.Parallel()
	ran := false
	e, ms, _ := setup(t, func(rs *RunState) (any, error) {
		rs.Set("k", 1)
		rs.Step("next", func(context.Context) (any, error) { ran = true; return 1, nil }, noRetry(), false)
		return nil, nil
	})
	ms.fail = store.ErrLeaseLost
	execute(e, context.Background(), claimed())
	if ran {
		t.Fatal("a step ran although what preceded it could not be saved")
	}
}
