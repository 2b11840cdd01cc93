package storepg_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/internal/pgtest/pgstore"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storepg"
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

// A keyed create alone in its batch takes the pipelined transaction
// (keyedPipelined): it records its key and response with its run; a retry is
// told the key was used and a reuse by another request that it conflicts,
// neither creating a run; a rejected start records no key, so the key serves a
// later start; an expired key is taken over.
func TestKeyedCreateOneAtATime(t *testing.T) {
	var (
		mu  sync.Mutex
		now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	s := pgstore.Open(t, pgtest.SchemaURL(t), clock)
	ctx := t.Context()
	if _, err := s.RunCreate(ctx, &store.RunCreateParams{Namespace: "ns", ID: "taken", WorkflowID: "taken", Workflow: "wf", Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	start := func(id, key string, fp byte) error {
		rec := &store.IdempotencyRecord{Key: key, Fingerprint: []byte{fp},
			Response: func(any) (int, []byte, error) { return 201, []byte(id), nil }}
		res, err := s.RunCreate(ctx, &store.RunCreateParams{Namespace: "ns", ID: id, WorkflowID: id, Workflow: "wf", Queue: "q", Idempotency: rec})
		if err == nil && (!res.Created || res.Run.ID != id) {
			t.Fatalf("start %s with key %s: %+v, want run %s created", id, key, res, id)
		}
		return err
	}
	recorded := func(key string, fp byte, body string) {
		t.Helper()
		e, err := s.IdempotencyGet(ctx, &store.IdempotencyGetParams{Namespace: "ns", Key: key})
		if err != nil || e.Status != 201 || string(e.Body) != body || e.Fingerprint[0] != fp {
			t.Fatalf("key %s: %+v, %v; want 201 %q with fingerprint %d", key, e, err, body, fp)
		}
	}
	exists := func(id string, want bool) {
		t.Helper()
		_, err := s.RunGet(ctx, &store.RunGetParams{Namespace: "ns", Ref: id})
		if got := err == nil; got != want || err != nil && !errors.Is(err, store.ErrRunNotFound) {
			t.Fatalf("run %s: %v, want it there: %v", id, err, want)
		}
	}
	if err := start("a", "k1", 1); err != nil {
		t.Fatal(err)
	}
	recorded("k1", 1, "a")
	if err := start("a2", "k1", 1); !errors.Is(err, store.ErrIdempotencyKeyUsed) {
		t.Fatalf("the same request again: %v, want ErrIdempotencyKeyUsed", err)
	}
	if err := start("b", "k1", 2); !errors.Is(err, store.ErrIdempotencyKeyConflict) {
		t.Fatalf("another request with the key: %v, want ErrIdempotencyKeyConflict", err)
	}
	exists("a2", false)
	exists("b", false)
	if err := start("taken", "k2", 1); !errors.Is(err, store.ErrRunExists) {
		t.Fatalf("a start of a taken run ID: %v, want ErrRunExists", err)
	}
	if _, err := s.IdempotencyGet(ctx, &store.IdempotencyGetParams{Namespace: "ns", Key: "k2"}); !errors.Is(err, store.ErrIdempotencyKeyNotFound) {
		t.Fatalf("the key of a rejected start: %v, want not recorded", err)
	}
	if err := start("c", "k2", 1); err != nil {
		t.Fatalf("a start with the key a rejected start left: %v", err)
	}
	recorded("k2", 1, "c")
	mu.Lock()
	now = now.Add(store.IdempotencyTTL + time.Minute)
	mu.Unlock()
	if err := start("d", "k1", 3); err != nil {
		t.Fatalf("a start with an expired key: %v", err)
	}
	recorded("k1", 3, "d")
	exists("a", true)
	if n := storepg.KeyedPipelined(s); n != 6 {
		t.Fatalf("%d batches went through the pipelined transaction, want all 6", n)
	}
}
