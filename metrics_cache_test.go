package trellis

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/trellis-dev/trellis/internal/servermetrics"
	"github.com/trellis-dev/trellis/store"
)

// The metrics keep the children of the workflow last counted (and of each
// status) to skip their lookups: attempts of workflows that take turns, and of
// every status, still count under their own labels.
func TestMetricsCountEachWorkflowAndStatus(t *testing.T) {
	m := NewMetrics()
	ic := m.interceptor()
	ctx := context.Background()
	statuses := []Status{"", StatusPending, StatusWaiting, StatusBlocked, StatusSucceeded, StatusFailed, StatusCancelled}
	for i := range 30 {
		wf := []string{"a", "b", "c"}[i%3]
		var err error
		if i%2 == 0 {
			err = errors.New("step failed")
		}
		ic.stepDone(ctx, &StepCall{Workflow: wf}, err, 0)
		ic.workflowDone(ctx, &WorkflowAttempt{Workflow: wf, Status: statuses[i%len(statuses)]})
	}
	for _, wf := range []string{"a", "b", "c"} {
		ok, failed := counterValue(t, m.stepAttempts.WithLabelValues(wf, "ok")), counterValue(t, m.stepAttempts.WithLabelValues(wf, "error"))
		if ok != 5 || failed != 5 {
			t.Errorf("workflow %s: %v ok and %v failed step attempts, want 5 and 5", wf, ok, failed)
		}
	}
	// 30 attempts over 3 workflows and 7 statuses: attempt i is workflow i%3
	// with status i%7.
	for i := range 21 {
		wf, st := []string{"a", "b", "c"}[i%3], statuses[i%len(statuses)]
		want := 0.0
		for j := i; j < 30; j += 21 {
			want++
		}
		label := string(st)
		if st == "" {
			label = "lost"
		}
		if got := counterValue(t, m.executions.WithLabelValues(wf, label)); got != want {
			t.Errorf("attempts of %s left %q: %v, want %v", wf, label, got, want)
		}
		ended := 0.0
		if st.Terminal() {
			ended = want
		}
		if got := counterValue(t, m.runsEnded.WithLabelValues(wf, label)); got != ended {
			t.Errorf("runs of %s ended %q: %v, want %v", wf, label, got, ended)
		}
	}
}

// counterValue is c's count.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// A store's commits are counted once by metrics that observe it through
// several clients and ObserveStore, and every observer of the store sees them
// (a server's metrics took the one observer a store had from a test's).
func TestMetricsCountAStoresCommitsOnce(t *testing.T) {
	ctx := context.Background()
	st, err := OpenStore(ctx, "sqlite://"+filepath.Join(t.TempDir(), "t.db"), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var seen atomic.Int64
	st.(store.CommitObserver).ObserveCommits(func(n int, _ time.Duration) { seen.Add(1) })
	m := NewMetrics()
	stop := m.observeStore(servermetrics.Store{Store: st})
	defer stop()
	var clients []*Client
	for range 2 {
		c, err := Open(ctx, Config{Backend: st, Metrics: m, Worker: WorkerOptions{Disabled: true}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
		if _, err := c.StartRaw(ctx, "nobody-serves", []byte("null"), StartOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	counted := func() int64 {
		var h dto.Metric
		if err := m.commitSize.Write(&h); err != nil {
			t.Fatal(err)
		}
		return int64(h.GetHistogram().GetSampleCount())
	}
	// A commit's observers run after its requests are answered: wait for them.
	settle := func(cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond() && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}
	settle(func() bool { return seen.Load() >= 2 && counted() == seen.Load() })
	if got, want := counted(), seen.Load(); got != want || want < 2 {
		t.Fatalf("the metrics counted %d commits, the store's other observer saw %d (want the same, at least 2)", got, want)
	}
	// Once neither ObserveStore nor a client of the metrics uses the store,
	// they stop counting its commits; its other observer goes on.
	stop()
	for _, c := range clients {
		c.Close()
	}
	before, seenBefore := counted(), seen.Load()
	other, err := Open(ctx, Config{Backend: st, Worker: WorkerOptions{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.StartRaw(ctx, "nobody-serves", []byte("null"), StartOptions{}); err != nil {
		t.Fatal(err)
	}
	settle(func() bool { return seen.Load() > seenBefore })
	if counted() != before || seen.Load() == seenBefore {
		t.Fatalf("after the metrics let the store go: %d commits counted (was %d), the other observer saw %d (was %d)",
			counted(), before, seen.Load(), seenBefore)
	}
}
