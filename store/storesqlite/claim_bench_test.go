package storesqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// seedRuns inserts n runs of workflow w in status st, available at avail
// (unix ns; NULL when 0), directly in SQL.
func seedRuns(tb testing.TB, s *Store, n int, prefix, wf string, st store.Status, avail int64) {
	tb.Helper()
	err := s.write(context.Background(), func(tx *wtx) error {
		_, err := tx.execRaw(`WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ?1)
			INSERT INTO runs (namespace, id, workflow_id, workflow, queue, status, available_at,
				created_at, updated_at, attempts)
			SELECT 'ns', ?2 || i, ?2 || i, ?3, 'q', ?4, NULLIF(?5, 0), 0, 0, 1 FROM c`,
			n, prefix, wf, string(st), avail)
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkClaimLargeStore claims from a store holding 100,000 waiting runs
// (timers in the future), 100,000 due pending runs of another workflow, and a
// backlog of 100,000 due pending runs: each claim must stay cheap.
func BenchmarkClaimLargeStore(b *testing.B) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := Open(context.Background(), Config{
		Path: filepath.Join(b.TempDir(), "t.db"), Now: func() time.Time { return now },
		Durability: DurabilityRelaxed,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const n = 100_000
	seedRuns(b, s, n, "wait-", "w", store.StatusWaiting, now.Add(time.Hour).UnixNano())
	seedRuns(b, s, n, "other-", "other", store.StatusPending, now.Add(-time.Hour).UnixNano())
	seedRuns(b, s, n, "due-", "w", store.StatusPending, now.Add(-time.Minute).UnixNano())
	// Versions as a Go worker of version 0 sends them.
	p := &store.RunsClaimParams{Namespace: "ns", Workflows: []string{"w"}, Versions: map[string][]int{"w": {0}}, Worker: "b", Max: 10, LeaseDuration: time.Hour}
	b.ResetTimer()
	for b.Loop() {
		res, err := s.RunsClaim(context.Background(), p)
		if err != nil || len(res.Runs) != 10 { // a full claim has no NextDue
			b.Fatalf("claim: %v, %v", res, err)
		}
	}
}
