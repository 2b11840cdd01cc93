package server

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// seqStore records the lease of every checkpoint the server makes.
type seqStore struct {
	store.Store
	mu     sync.Mutex
	leases []store.Lease
}

func (s *seqStore) Checkpoint(ctx context.Context, p *store.CheckpointParams) (*store.CheckpointResult, error) {
	s.mu.Lock()
	s.leases = append(s.leases, p.Lease)
	s.mu.Unlock()
	return s.Store.Checkpoint(ctx, p)
}

// TestRemoteCheckpointsCarryTheRunSequence: a remote worker's checkpoints
// reach the store with the run's sequence from the claim the server pushed
// (store.Lease.RunSeq), with which the Postgres store finds the run without
// looking its ID up (three lookups per w1 run fewer).
func TestRemoteCheckpointsCarryTheRunSequence(t *testing.T) {
	st, err := trellis.OpenStore(t.Context(), storesqlite.URL(filepath.Join(t.TempDir(), "t.db")), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	rec := &seqStore{Store: st}
	base, shutdown := serveOn(t, Config{Backend: rec})
	defer shutdown()
	wf := trellis.NewWorkflow("seq-steps", func(wc *trellis.Context, in int) (int, error) {
		for range 3 {
			var err error
			if in, err = trellis.Step(wc, "inc", func(context.Context) (int, error) { return in + 1, nil }); err != nil {
				return 0, err
			}
		}
		return in, nil
	})
	w, closeWorker := workerOn(t, base, wf)
	defer closeWorker()
	h, err := trellis.Start(t.Context(), w.Client(), wf, 1)
	if err != nil {
		t.Fatal(err)
	}
	if out, err := h.Result(t.Context()); err != nil || out != 4 {
		t.Fatalf("result %d, %v", out, err)
	}
	run, err := st.RunGet(t.Context(), &store.RunGetParams{Namespace: "default", Ref: h.RunID()})
	if err != nil {
		t.Fatal(err)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.leases) == 0 {
		t.Fatal("no checkpoint reached the store")
	}
	for _, l := range rec.leases {
		if l.RunID == run.ID && l.RunSeq != run.Sequence {
			t.Fatalf("a checkpoint of run %s carried sequence %d, want %d", l.RunID, l.RunSeq, run.Sequence)
		}
	}
}
