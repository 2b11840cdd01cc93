package storepg_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/internal/pgtest/pgstore"
	"github.com/trellis-dev/trellis/store"
)

// Keyed creates that commit together (keyedcreate.go) each get what they would
// have got alone: a new key creates its run and records its response; of two
// creates with one key exactly one executes, and the other is told the key was
// used (same request) or reused (another request); a rejected start records no
// key.
func TestKeyedCreatesTogether(t *testing.T) {
	s := pgstore.Open(t, pgtest.SchemaURL(t), nil)
	ctx := t.Context()
	if _, err := s.RunCreate(ctx, &store.RunCreateParams{Namespace: "ns", ID: "taken", WorkflowID: "taken", Workflow: "wf", Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	type start struct {
		id, key string
		fp      byte
	}
	var starts []start
	for i := range 30 {
		starts = append(starts, start{id: fmt.Sprint("new-", i), key: fmt.Sprint("k-", i), fp: 1})
	}
	for i := range 10 {
		starts = append(starts, start{id: fmt.Sprint("new-", i), key: fmt.Sprint("k-", i), fp: 1}) // a retry
	}
	for i := 10; i < 15; i++ {
		starts = append(starts, start{id: fmt.Sprint("other-", i), key: fmt.Sprint("k-", i), fp: 2}) // another request
	}
	for i := range 5 {
		starts = append(starts, start{id: "taken", key: fmt.Sprint("rejected-", i), fp: 1})
	}
	for round := range 5 { // rounds so that concurrent creates really share batches
		ns := fmt.Sprint("ns", round)
		if _, err := s.RunCreate(ctx, &store.RunCreateParams{Namespace: ns, ID: "taken", WorkflowID: "taken", Workflow: "wf", Queue: "q"}); err != nil {
			t.Fatal(err)
		}
		errs := make([]error, len(starts))
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for i, st := range starts {
			wg.Go(func() {
				<-gate
				rec := &store.IdempotencyRecord{Key: st.key, Fingerprint: []byte{st.fp},
					Response: func(any) (int, []byte, error) { return 201, []byte(st.id), nil }}
				_, errs[i] = s.RunCreate(ctx, &store.RunCreateParams{Namespace: ns, ID: st.id, WorkflowID: st.id,
					Workflow: "wf", Queue: "q", Idempotency: rec})
			})
		}
		close(gate)
		wg.Wait()
		executed := map[string]int{}
		for i, st := range starts {
			switch err := errs[i]; {
			case err == nil:
				executed[st.key]++
			case st.id == "taken":
				if !errors.Is(err, store.ErrRunExists) {
					t.Fatalf("round %d: start of a taken ID with key %s: %v, want ErrRunExists", round, st.key, err)
				}
				if _, err := s.IdempotencyGet(ctx, &store.IdempotencyGetParams{Namespace: ns, Key: st.key}); !errors.Is(err, store.ErrIdempotencyKeyNotFound) {
					t.Fatalf("round %d: key %s of a rejected start: %v, want not recorded", round, st.key, err)
				}
			case errors.Is(err, store.ErrIdempotencyKeyUsed) || errors.Is(err, store.ErrIdempotencyKeyConflict):
				e, gerr := s.IdempotencyGet(ctx, &store.IdempotencyGetParams{Namespace: ns, Key: st.key})
				if gerr != nil {
					t.Fatalf("round %d: key %s: %v", round, st.key, gerr)
				}
				same := e.Fingerprint[0] == st.fp
				if same != errors.Is(err, store.ErrIdempotencyKeyUsed) {
					t.Fatalf("round %d: key %s (fingerprint %d, recorded %d): %v", round, st.key, st.fp, e.Fingerprint[0], err)
				}
			default:
				t.Fatalf("round %d: start %s with key %s: %v", round, st.id, st.key, err)
			}
		}
		for i := range 30 {
			key := fmt.Sprint("k-", i)
			if executed[key] != 1 {
				t.Fatalf("round %d: key %s executed %d times, want once", round, key, executed[key])
			}
			e, err := s.IdempotencyGet(ctx, &store.IdempotencyGetParams{Namespace: ns, Key: key})
			if err != nil || e.Status != 201 {
				t.Fatalf("round %d: key %s recorded %+v, %v", round, key, e, err)
			}
			if _, err := s.RunGet(ctx, &store.RunGetParams{Namespace: ns, Ref: string(e.Body)}); err != nil {
				t.Fatalf("round %d: the run key %s answered: %v", round, key, err)
			}
		}
	}
}
