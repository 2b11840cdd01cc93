package storesqlite

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// seedKeyed inserts n due pending runs of workflow w in queue q, with concurrency
// key key || (i % keys) (one key when keys is 1).
func seedKeyed(tb testing.TB, s *Store, n, keys int, prefix, queue, key string, avail int64) {
	tb.Helper()
	err := s.write(context.Background(), func(tx *wtx) error {
		_, err := tx.execRaw(`WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < ?1)
			INSERT INTO runs (namespace, id, workflow_id, workflow, queue, status, available_at,
				created_at, updated_at, concurrency_key)
			SELECT 'ns', ?2 || i, ?2 || i, 'w', ?3, 'pending', ?4, 0, 0,
				CASE WHEN ?5 = 1 THEN ?6 ELSE ?6 || (i % ?5) END FROM c`,
			n, prefix, queue, avail, keys, key)
		return err
	})
	if err != nil {
		tb.Fatal(err)
	}
}

func openLimited(b *testing.B, now time.Time, settings store.QueueSettings) *Store {
	s, err := Open(context.Background(), Config{
		Path: filepath.Join(b.TempDir(), "t.db"), Now: func() time.Time { return now },
		Durability: DurabilityRelaxed,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	ctx := context.Background()
	if _, err := s.NamespaceCreate(ctx, &store.NamespaceCreateParams{Name: "ns"}); err != nil {
		b.Fatal(err)
	}
	if _, err := s.QueueCreate(ctx, &store.QueueCreateParams{Namespace: "ns", Name: "q", QueueSettings: settings}); err != nil {
		b.Fatal(err)
	}
	return s
}

// claimAndFinish claims up to 10 runs and finishes them: a worker's steady state.
func claimAndFinish(b *testing.B, s *Store, want int) {
	ctx := context.Background()
	p := &store.RunsClaimParams{Namespace: "ns", Workflows: []string{"w"}, Worker: "b", Max: 10, LeaseDuration: time.Hour}
	res, err := s.RunsClaim(ctx, p)
	if err != nil || len(res.Runs) != want {
		b.Fatalf("claim: %d runs, %v; want %d", len(res.Runs), err, want)
	}
	for _, cr := range res.Runs {
		l := store.Lease{Namespace: "ns", RunID: cr.Run.ID, Token: cr.LeaseToken}
		if _, err := s.Checkpoint(ctx, &store.CheckpointParams{Lease: l, Status: store.StatusSucceeded}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkClaimLimitedKeys claims (and finishes) 10 runs at a time from a queue
// with a concurrency limit and a key limit of 1 holding 100,000 due pending runs
// over 1,000 keys.
func BenchmarkClaimLimitedKeys(b *testing.B) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s := openLimited(b, now, store.QueueSettings{ConcurrencyLimit: ptr(100), KeyLimit: ptr(1)})
	seedKeyed(b, s, 100_000, 1000, "r-", "q", "k", now.Add(-time.Minute).UnixNano())
	b.ResetTimer()
	for b.Loop() {
		claimAndFinish(b, s, 10)
	}
}

// BenchmarkClaimLimitedHotKey is the worst case of a key limit: 100,000 due runs
// of one key, which has a run running at its limit, ahead of the runs of other
// keys. A claim walks past the hot key's runs to reach the others.
func BenchmarkClaimLimitedHotKey(b *testing.B) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s := openLimited(b, now, store.QueueSettings{KeyLimit: ptr(1)})
	seedKeyed(b, s, 100_000, 1, "hot-", "q", "hot", now.Add(-time.Hour).UnixNano())
	// The hot key's one running run.
	claimOnly := &store.RunsClaimParams{Namespace: "ns", Workflows: []string{"w"}, Worker: "b", Max: 1, LeaseDuration: time.Hour}
	if res, err := s.RunsClaim(context.Background(), claimOnly); err != nil || len(res.Runs) != 1 {
		b.Fatalf("claim of the hot run: %v", err)
	}
	seedKeyed(b, s, 1_000_000, 100_000, "cold-", "q", "c", now.Add(-time.Minute).UnixNano())
	b.ResetTimer()
	for b.Loop() {
		claimAndFinish(b, s, 10)
	}
}

func ptr(n int) *int { return &n }
