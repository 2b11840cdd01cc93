package retention

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/clock"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// finishRuns creates and finishes n runs of namespace ns at the clock's time.
func finishRuns(t *testing.T, st store.Store, ns string, n int) []string {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("%s-%d-%d", ns, time.Now().UnixNano(), i)
		if _, err := st.RunCreate(ctx, &store.RunCreateParams{Namespace: ns, ID: id, WorkflowID: id, Workflow: "wf", Queue: "default"}); err != nil {
			t.Fatal(err)
		}
		res, err := st.RunsClaim(ctx, &store.RunsClaimParams{Namespace: ns, Workflows: []string{"wf"}, Worker: "w", Max: 1, LeaseDuration: time.Minute})
		if err != nil || len(res.Runs) != 1 {
			t.Fatalf("claim: %v %v", res, err)
		}
		cr := res.Runs[0]
		if _, err := st.Checkpoint(ctx, &store.CheckpointParams{Status: store.StatusSucceeded,
			Lease: store.Lease{Namespace: ns, RunID: cr.Run.ID, Token: cr.LeaseToken},
			Ops:   []*store.Op{{Position: 0, Kind: store.OpStep, Name: "s", Done: true, StartedAt: time.Unix(0, 0)}}}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, cr.Run.ID)
	}
	return ids
}

// The purger deletes the runs of every namespace once their retention period
// has passed, in batches, and keeps the rest; it stops on Stop.
func TestPurgerDeletesExpiredRuns(t *testing.T) {
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	st, err := storesqlite.Open(context.Background(), storesqlite.Config{Path: filepath.Join(t.TempDir(), "t.db"), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	old := finishRuns(t, st, "a", 25)
	oldB := finishRuns(t, st, "b", 3)
	clk.Advance(20 * 24 * time.Hour)
	young := finishRuns(t, st, "a", 2)
	clk.Advance(11 * 24 * time.Hour) // the first runs are 31 days old, the young ones 11
	p := New(Config{Store: st, Clock: clk, Batch: 10, Duty: 1, Interval: time.Hour})
	p.Start()
	defer p.Stop()
	deadline := time.Now().Add(10 * time.Second)
	for p.Deleted() < 28 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if p.Deleted() != 28 {
		t.Fatalf("deleted %d runs, want 28", p.Deleted())
	}
	for _, id := range append(old, oldB...) {
		ns := "a"
		if id[0] == 'b' {
			ns = "b"
		}
		if _, err := st.RunGet(context.Background(), &store.RunGetParams{Namespace: ns, Ref: id}); !errors.Is(err, store.ErrRunNotFound) {
			t.Fatalf("expired run %s: %v", id, err)
		}
	}
	for _, id := range young {
		if _, err := st.RunGet(context.Background(), &store.RunGetParams{Namespace: "a", Ref: id}); err != nil {
			t.Fatalf("young run %s: %v", id, err)
		}
	}
	// The next pass comes after Interval, and deletes the young runs once due.
	clk.Advance(20 * 24 * time.Hour)
	deadline = time.Now().Add(10 * time.Second)
	for p.Deleted() < 30 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if p.Deleted() != 30 {
		t.Fatalf("deleted %d runs after the next interval, want 30", p.Deleted())
	}
}

// A namespace whose period is zero keeps its runs.
func TestPurgerKeepsForEver(t *testing.T) {
	clk := clock.NewFake(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	st, err := storesqlite.Open(context.Background(), storesqlite.Config{Path: filepath.Join(t.TempDir(), "t.db"), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	finishRuns(t, st, "keep", 3)
	clk.Advance(365 * 24 * time.Hour)
	p := New(Config{Store: st, Clock: clk, Period: func(context.Context, string) (time.Duration, error) { return 0, nil }})
	if err := p.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if p.Deleted() != 0 {
		t.Fatalf("deleted %d", p.Deleted())
	}
	p.Start()
	p.Stop()
}
