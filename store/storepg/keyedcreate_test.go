package storepg_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	_ "github.com/trellis-dev/trellis" // its renderers of idempotency responses, by name
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

// A keyed create alone in its batch records its key and response with its
// run, in one statement when the key is new and the run created (keyedOne),
// else in the transaction that decides the rest (keyedCreates): a retry is
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
	if n := storepg.KeyedLone(s); n != 2 {
		t.Fatalf("%d creates were made in one statement, want the 2 whose key was new and run created", n)
	}
}

// A lone keyed create renders its response before its run is created
// (keyedOne), from the run it expects: for every kind of lone start a
// client makes (a deadline and an availability with nanoseconds, a start in
// the future, a retry policy, a pinned version, a priority, a trace parent,
// a claim taken and a claim a limited queue refuses), the response stored under the
// key is the one the server's renderer (package trellis's, registered by
// name) makes of the run as created, none had to be corrected, and the last
// rendering, which the server answers, is that one too.
func TestKeyedLoneResponseAsCreated(t *testing.T) {
	s := pgstore.Open(t, pgtest.SchemaURL(t), nil)
	ctx := t.Context()
	one := 1
	if _, err := s.QueueCreate(ctx, &store.QueueCreateParams{Namespace: store.DefaultNamespace, Name: "limited",
		QueueSettings: store.QueueSettings{ConcurrencyLimit: &one}}); err != nil {
		t.Fatal(err)
	}
	odd := time.Now().Add(time.Hour).Round(0).Add(123) // nanoseconds the store drops
	past := time.Now().Add(-time.Minute).Add(321)
	claim := &store.CreateClaim{Worker: "w-1", LeaseDuration: 30 * time.Second}
	cases := map[string]store.RunCreateParams{
		"plain":            {},
		"workflow ID":      {WorkflowID: "named"},
		"deadline":         {Deadline: &odd},
		"available later":  {AvailableAt: &odd},
		"available before": {AvailableAt: &past},
		"retry":            {Retry: &store.RunRetry{MaxAttempts: 4, InitialBackoff: store.Duration(time.Second), Factor: 3, Jitter: 0.5}},
		"pinned":           {Version: 7, Pinned: true},
		"priority":         {Priority: 9, Version: 2, TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01", ConcurrencyKey: "k"},
		"input":            {Input: []byte(`{"a":[1,2,3]}`)},
		"claimed":          {Claim: claim, Deadline: &odd},
		"claim later":      {Claim: claim, AvailableAt: &odd},
		"claim refused":    {Claim: claim, Queue: "limited"},
	}
	i := 0
	for name, p := range cases {
		i++
		p.Namespace, p.ID, p.Workflow = store.DefaultNamespace, fmt.Sprint("run-", i), "wf"
		if p.WorkflowID == "" {
			p.WorkflowID = p.ID
		}
		if p.Queue == "" {
			p.Queue = "default"
		}
		rec := &store.IdempotencyRecord{Key: fmt.Sprint("key-", i), Fingerprint: []byte{byte(i)},
			Renderer: "trellis.createdRun", Status: 201}
		if err := rec.RebuildResponse(); err != nil {
			t.Fatal(err)
		}
		var last []byte
		render := rec.Response
		rec.Response = func(v any) (int, []byte, error) {
			status, body, err := render(v)
			last = body
			return status, body, err
		}
		p.Idempotency = rec
		res, err := s.RunCreate(ctx, &p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		_, want, err := render(res)
		if err != nil {
			t.Fatal(err)
		}
		e, err := s.IdempotencyGet(ctx, &store.IdempotencyGetParams{Namespace: p.Namespace, Key: rec.Key})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if e.Status != 201 || string(e.Body) != string(want) {
			t.Errorf("%s: the key holds %d %s, want 201 %s", name, e.Status, e.Body, want)
		}
		if string(last) != string(want) {
			t.Errorf("%s: rendered last %s, want %s", name, last, want)
		}
		switch wantStatus := store.StatusPending; {
		case name == "claimed":
			wantStatus = store.StatusRunning
			fallthrough
		default:
			if res.Run.Status != wantStatus {
				t.Errorf("%s: the run is %s, want %s", name, res.Run.Status, wantStatus)
			}
		}
	}
	if n := storepg.KeyedMispredicted(s); n != 0 {
		t.Errorf("%d responses were corrected after their create, want none", n)
	}
	if n := storepg.KeyedLone(s); n != int64(len(cases)) {
		t.Errorf("%d creates were made in one statement, want all %d", n, len(cases))
	}
}

// Two stores on one database (two servers) making lone keyed creates with one
// key at the same time: of a request and its retry, exactly one creates its
// run, whether the two name the same run ID or not, and the other is told the
// key was used; of two requests with one key, the other that it conflicts.
// The one that lost its statement to the other's key (keyedOne) decides in
// keyedCreates.
func TestKeyedLoneAcrossStores(t *testing.T) {
	url := pgtest.SchemaURL(t)
	stores := []*storepg.Store{pgstore.Open(t, url, nil), pgstore.Open(t, url, nil)}
	ctx := t.Context()
	for round := range 60 {
		key := fmt.Sprint("k-", round)
		sameID, sameRequest := round%2 == 0, round%3 != 0
		errs, ids := make([]error, 2), make([]string, 2)
		var wg sync.WaitGroup
		gate := make(chan struct{})
		for i, s := range stores {
			ids[i] = fmt.Sprint("r-", round, "-", i)
			if sameID {
				ids[i] = fmt.Sprint("r-", round)
			}
			fp := byte(1)
			if !sameRequest {
				fp = byte(1 + i)
			}
			id := ids[i]
			wg.Go(func() {
				<-gate
				rec := &store.IdempotencyRecord{Key: key, Fingerprint: []byte{fp},
					Response: func(any) (int, []byte, error) { return 201, []byte(id), nil }}
				_, errs[i] = s.RunCreate(ctx, &store.RunCreateParams{Namespace: "ns", ID: id, WorkflowID: id,
					Workflow: "wf", Queue: "q", Idempotency: rec})
			})
		}
		close(gate)
		wg.Wait()
		won := -1
		for i, err := range errs {
			switch {
			case err == nil && won < 0:
				won = i
			case err == nil:
				t.Fatalf("round %d: both creates executed", round)
			case sameRequest && !errors.Is(err, store.ErrIdempotencyKeyUsed),
				!sameRequest && !errors.Is(err, store.ErrIdempotencyKeyConflict):
				t.Fatalf("round %d (same request %v, same ID %v): %v", round, sameRequest, sameID, err)
			}
		}
		if won < 0 {
			t.Fatalf("round %d: no create executed: %v", round, errs)
		}
		e, err := stores[0].IdempotencyGet(ctx, &store.IdempotencyGetParams{Namespace: "ns", Key: key})
		if err != nil || string(e.Body) != ids[won] {
			t.Fatalf("round %d: the key holds %+v, %v; want the response of %s", round, e, err, ids[won])
		}
		if !sameID {
			lost := ids[1-won]
			if _, err := stores[0].RunGet(ctx, &store.RunGetParams{Namespace: "ns", Ref: lost}); !errors.Is(err, store.ErrRunNotFound) {
				t.Fatalf("round %d: the losing create's run %s: %v, want none", round, lost, err)
			}
		}
	}
	// Every winner made its create in one statement; every loser's statement
	// failed on the key or created no run, and keyedCreates decided.
	if n := storepg.KeyedLone(stores[0]) + storepg.KeyedLone(stores[1]); n != 60 {
		t.Errorf("%d creates were made in one statement, want the 60 that executed", n)
	}
}
