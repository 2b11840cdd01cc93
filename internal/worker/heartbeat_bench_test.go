package worker

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/internal/pgtest/pgstore"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// BenchmarkHeartbeatTick measures one heartbeat tick of a worker holding n leases:
// one LeasesExtend of all of them and one WorkerHeartbeat. A worker ticks every
// LeaseDuration/3, so with the default 10s lease its heartbeat costs 0.3 ticks a
// second: multiply the time of a tick by 0.3 for the share of a second it takes.
// Run with: go test -run '^$' -bench HeartbeatTick ./internal/worker
func BenchmarkHeartbeatTick(b *testing.B) {
	stores := map[string]func(b *testing.B) store.Store{
		"sqlite": func(b *testing.B) store.Store {
			s, err := storesqlite.Open(b.Context(), storesqlite.Config{Path: filepath.Join(b.TempDir(), "b.db")})
			if err != nil {
				b.Fatal(err)
			}
			return s
		},
		"postgres": func(b *testing.B) store.Store { return pgstore.Open(b, pgtest.SchemaURL(b), nil) },
	}
	for _, name := range []string{"sqlite", "postgres"} {
		for _, n := range []int{0, 16, 256} {
			b.Run(fmt.Sprintf("%s/runs=%d", name, n), func(b *testing.B) {
				s := stores[name](b)
				defer s.Close()
				w := benchWorker(b, s, n)
				for b.Loop() {
					w.heartbeat()
				}
			})
		}
	}
}

// benchWorker returns a worker (not started) that holds the leases of n runs.
func benchWorker(b *testing.B, s store.Store, n int) *Worker {
	w, err := New(Config{Store: s, Namespace: "ns", Name: "bench", Workflows: func() []string { return []string{"wf"} },
		LeaseDuration: time.Hour}, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		id := fmt.Sprintf("r-%d", i)
		if _, err := s.RunCreate(b.Context(), &store.RunCreateParams{Namespace: "ns", ID: id, WorkflowID: id, Workflow: "wf", Queue: "q"}); err != nil {
			b.Fatal(err)
		}
	}
	if n > 0 {
		res, err := s.RunsClaim(b.Context(), &store.RunsClaimParams{Namespace: "ns", Workflows: []string{"wf"}, Worker: "bench", Max: n, LeaseDuration: time.Hour})
		if err != nil || len(res.Runs) != n {
			b.Fatalf("claiming %d runs: %v", n, err)
		}
		for _, cr := range res.Runs {
			w.active[cr.Run.ID] = &active{ctl: &Control{Lease: store.Lease{Namespace: "ns", RunID: cr.Run.ID, Token: cr.LeaseToken}},
				cancel: func(error) {}}
		}
	}
	b.Cleanup(func() { w.hardStop(ErrShutdown) })
	return w
}
