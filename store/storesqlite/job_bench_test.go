package storesqlite

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// BenchmarkJobBatch is the store's share of working one-step jobs: each round
// claims 1,000 due pending runs in one call and ends them with 1,000 concurrent
// checkpoints, which the writer merges. It reports the time per job of the
// claim call and of the finishes (fsync included):
//
//	go test -run XXX -bench JobBatch ./store/storesqlite
func BenchmarkJobBatch(b *testing.B) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := Open(context.Background(), Config{
		Path: filepath.Join(b.TempDir(), "t.db"), Now: func() time.Time { return now },
	})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const per = 1000
	ctx := context.Background()
	var claimD, finishD time.Duration
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		seedKeyed(b, s, per, 1, time.Now().Format("150405.000000000")+"-", "default", "", now.Add(-time.Second).UnixNano())
		b.StartTimer()
		t0 := time.Now()
		res, err := s.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "ns", Workflows: []string{"w"}, Worker: "b", Max: per, LeaseDuration: time.Hour})
		if err != nil || len(res.Runs) != per {
			b.Fatalf("claim: %v", err)
		}
		t1 := time.Now()
		var wg sync.WaitGroup
		for _, cr := range res.Runs {
			wg.Go(func() {
				// The lease as the engine writes with it: its run's sequence included.
				if _, err := s.Checkpoint(ctx, &store.CheckpointParams{Lease: cr.Lease(), Status: store.StatusSucceeded, Output: []byte(`"ok"`)}); err != nil {
					b.Error(err)
				}
			})
		}
		wg.Wait()
		claimD += t1.Sub(t0)
		finishD += time.Since(t1)
	}
	b.ReportMetric(float64(claimD.Microseconds())/float64(b.N*per), "claim_us/job")
	b.ReportMetric(float64(finishD.Microseconds())/float64(b.N*per), "finish_us/job")
}
