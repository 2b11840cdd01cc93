package storesqlite_test

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// benchParallelism is goroutines per GOMAXPROCS: enough concurrent callers for
// batches to form, as in a worker running many runs.
const benchParallelism = 64

var durabilities = []storesqlite.Durability{storesqlite.DurabilityFsync, storesqlite.DurabilityRelaxed}

func benchStore(b *testing.B, d storesqlite.Durability) *storesqlite.Store {
	s, _, _ := setup(b, func(c *storesqlite.Config) { c.Durability = d; c.Now = time.Now })
	return s
}

// reportThroughput reports calls per second and the mean group-commit batch.
func reportThroughput(b *testing.B, s *storesqlite.Store, before storesqlite.Stats) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	st := s.Stats()
	if txs := st.Transactions - before.Transactions; txs > 0 {
		b.ReportMetric(float64(st.Requests-before.Requests)/float64(txs), "reqs/tx")
	}
}

func BenchmarkRunCreateParallel(b *testing.B) {
	for _, d := range durabilities {
		b.Run(string(d), func(b *testing.B) {
			s := benchStore(b, d)
			input := []byte(`{"order_id":"ord-123456","amount":4200,"currency":"EUR"}`)
			var n atomic.Int64
			before := s.Stats()
			b.SetParallelism(benchParallelism)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					id := fmt.Sprint("run-", n.Add(1))
					_, err := s.RunCreate(context.Background(), &store.RunCreateParams{
						Namespace: "ns", ID: id, WorkflowID: id, Workflow: "order", Queue: "default", Input: input,
					})
					if err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportThroughput(b, s, before)
		})
	}
}

// BenchmarkCheckpointParallel: step checkpoints (an op and its stream event,
// as the engine writes them) of many runs at once; "by sequence" with the
// lease's RunSeq (the run found by rowid), "by ID" without it (looked up in
// runs_namespace_id first).
func BenchmarkCheckpointParallel(b *testing.B) {
	for _, d := range durabilities {
		for _, bySeq := range []bool{false, true} {
			name := string(d) + "/by ID"
			if bySeq {
				name = string(d) + "/by sequence"
			}
			b.Run(name, func(b *testing.B) {
				s := benchStore(b, d)
				leases := claimBenchRuns(b, s, benchParallelism*runtime.GOMAXPROCS(0), bySeq)
				result := []byte(`{"charge_id":"ch_1234567890","status":"captured"}`)
				event := []byte(`{"position":0,"name":"charge","result":{"charge_id":"ch_1234567890"}}`)
				var next atomic.Int64
				before := s.Stats()
				b.SetParallelism(benchParallelism)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					lease := leases[next.Add(1)-1]
					for pos := 0; pb.Next(); pos++ {
						now := time.Now()
						_, err := s.Checkpoint(context.Background(), &store.CheckpointParams{
							Lease: lease, Status: store.StatusRunning,
							Ops: []*store.Op{{Position: pos, Kind: store.OpStep, Name: "charge", Done: true,
								Result: result, Attempts: 1, StartedAt: now, FinishedAt: &now}},
							Stream: []store.StreamWrite{{Name: "step.completed", Data: event}},
						})
						if err != nil {
							b.Error(err)
							return
						}
					}
				})
				reportThroughput(b, s, before)
			})
		}
	}
}

// claimBenchRuns creates and claims n runs and returns their leases, with
// their runs' sequences when bySeq.
func claimBenchRuns(b *testing.B, s *storesqlite.Store, n int, bySeq bool) []store.Lease {
	for i := range n {
		createRun(b, s, fmt.Sprint("r", i))
	}
	res, err := s.RunsClaim(context.Background(), &store.RunsClaimParams{
		Namespace: "ns", Workflows: []string{"w"}, Worker: "bench", Max: n, LeaseDuration: time.Hour,
	})
	if err != nil || len(res.Runs) != n {
		b.Fatalf("claiming: %d runs, %v", len(res.Runs), err)
	}
	leases := make([]store.Lease, n)
	for i, cr := range res.Runs {
		leases[i] = store.Lease{Namespace: "ns", RunID: cr.Run.ID, Token: cr.LeaseToken}
		if bySeq {
			leases[i] = cr.Lease()
		}
	}
	return leases
}
