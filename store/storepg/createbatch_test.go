package storepg_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storepg"
)

// Creates that commit in one batch share one statement: each gets what it
// would have got alone. Of two creates of one run ID, or of one active
// workflow ID, exactly one succeeds and the other gets ErrRunExists; a create
// with a claim is returned claimed unless its queue limits claims (paused here),
// which leaves the run pending.
func TestMergedCreates(t *testing.T) {
	cfg, err := storepg.ParseURL(pgtest.SchemaURL(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Writers = 1 // one writer: concurrent creates queue into the same batches
	s, err := storepg.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var most atomic.Int64
	s.ObserveCommits(func(n int, _ time.Duration) {
		for m := most.Load(); int64(n) > m && !most.CompareAndSwap(m, int64(n)); m = most.Load() {
		}
	})
	ctx := t.Context()
	if _, err := s.NamespaceCreate(ctx, &store.NamespaceCreateParams{Name: "ns"}); err != nil && !errors.Is(err, store.ErrNamespaceExists) {
		t.Fatal(err)
	}
	if _, err := s.QueueCreate(ctx, &store.QueueCreateParams{Namespace: "ns", Name: "paused", Paused: true}); err != nil {
		t.Fatal(err)
	}
	type want struct {
		id, wid, queue string
		claim          bool
	}
	var starts []want
	for i := range 40 {
		starts = append(starts, want{id: fmt.Sprintf("run-%02d", i), wid: fmt.Sprintf("wf-%02d", i), queue: "q", claim: i%2 == 0})
	}
	for i := range 5 {
		starts = append(starts,
			want{id: fmt.Sprintf("run-%02d", i), wid: fmt.Sprintf("other-%02d", i), queue: "q"}, // run ID taken
			want{id: fmt.Sprintf("dup-%02d", i), wid: fmt.Sprintf("wf-%02d", 10+i), queue: "q"}, // workflow ID taken
			want{id: fmt.Sprintf("paused-%02d", i), wid: fmt.Sprintf("p-%02d", i), queue: "paused", claim: true})
	}
	for round := 0; round < 20 && most.Load() < 2; round++ {
		// The first round creates the runs; a round after it only meets
		// ErrRunExists, which is as good a batch as any to look for merging.
		results := make([]*store.RunCreateResult, len(starts))
		errs := make([]error, len(starts))
		var wg sync.WaitGroup
		for i, w := range starts {
			wg.Go(func() {
				p := &store.RunCreateParams{Namespace: "ns", ID: w.id, WorkflowID: w.wid, Workflow: "wf", Queue: w.queue,
					Input: []byte(`{"n":1}`)}
				if w.claim {
					p.Claim = &store.CreateClaim{Worker: "w", LeaseDuration: time.Minute}
				}
				results[i], errs[i] = s.RunCreate(ctx, p)
			})
		}
		wg.Wait()
		if round > 0 {
			for i, err := range errs {
				if !errors.Is(err, store.ErrRunExists) {
					t.Fatalf("round %d, %s again: %v, want ErrRunExists", round, starts[i].id, err)
				}
			}
			continue
		}
		byID := map[string]int{}
		byWID := map[string]int{}
		for i, w := range starts {
			if errs[i] != nil {
				if !errors.Is(errs[i], store.ErrRunExists) {
					t.Fatalf("%s: %v", w.id, errs[i])
				}
				continue
			}
			r := results[i]
			byID[w.id]++
			byWID[w.wid]++
			if r.Run.ID != w.id || r.Run.WorkflowID != w.wid || string(r.Run.Input) != `{"n":1}` || !r.Created {
				t.Fatalf("%s: created %+v", w.id, r.Run)
			}
			switch {
			case w.claim && w.queue == "q":
				if r.Claimed == nil || r.Run.Status != store.StatusRunning || r.Claimed.LeaseToken == 0 {
					t.Fatalf("%s: created with a claim, got status %s claimed %v", w.id, r.Run.Status, r.Claimed)
				}
			default:
				if r.Claimed != nil || r.Run.Status != store.StatusPending {
					t.Fatalf("%s: got status %s claimed %v, want pending", w.id, r.Run.Status, r.Claimed)
				}
			}
			got, err := s.RunGet(ctx, &store.RunGetParams{Namespace: "ns", Ref: w.id})
			if err != nil || got.WorkflowID != w.wid || got.Status != r.Run.Status {
				t.Fatalf("RunGet(%s) = %+v, %v; want what the create returned", w.id, got, err)
			}
		}
		for i := range 40 {
			id, n := fmt.Sprintf("run-%02d", i), byID[fmt.Sprintf("run-%02d", i)]
			if i >= 10 && i < 15 { // run-1x and dup-0x race for workflow ID wf-1x
				n += byID[fmt.Sprintf("dup-%02d", i-10)]
			}
			if n != 1 {
				t.Errorf("run ID %s (or its rival for the workflow ID) created %d times", id, n)
			}
		}
		for i := range 5 {
			if wid := fmt.Sprintf("wf-%02d", 10+i); byWID[wid] != 1 {
				t.Errorf("workflow ID %s has %d active runs", wid, byWID[wid])
			}
			if id := fmt.Sprintf("paused-%02d", i); byID[id] != 1 {
				t.Errorf("%s created %d times", id, byID[id])
			}
		}
	}
	if most.Load() < 2 {
		t.Fatalf("no batch held two creates (largest %d): the merged statement went untested", most.Load())
	}
}
