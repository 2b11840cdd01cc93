package storesqlite_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// clock is a fake clock tests advance by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock {
	return &clock{now: time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)}
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// setup opens a store on a fresh file and closes it when the test ends.
func setup(t testing.TB, mods ...func(*storesqlite.Config)) (*storesqlite.Store, *clock, storesqlite.Config) {
	t.Helper()
	clk := newClock()
	cfg := storesqlite.Config{Path: filepath.Join(t.TempDir(), "trellis.db"), Now: clk.Now}
	for _, m := range mods {
		m(&cfg)
	}
	s, err := storesqlite.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, clk, cfg
}

func createRun(t testing.TB, s store.Store, id string) *store.Run {
	t.Helper()
	res, err := s.RunCreate(context.Background(), &store.RunCreateParams{
		Namespace: "ns", ID: id, WorkflowID: "wf-" + id, Workflow: "w", Queue: "q",
		Input: []byte(`{"n":1}`),
	})
	if err != nil {
		t.Fatalf("RunCreate %s: %v", id, err)
	}
	return res.Run
}

func claimAll(t testing.TB, s store.Store, max int) []*store.ClaimedRun {
	t.Helper()
	res, err := s.RunsClaim(context.Background(), &store.RunsClaimParams{
		Namespace: "ns", Workflows: []string{"w"}, Worker: "worker-1", Max: max,
		LeaseDuration: time.Minute,
	})
	if err != nil {
		t.Fatalf("RunsClaim: %v", err)
	}
	return res.Runs
}
