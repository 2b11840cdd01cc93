package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

var idempotencyCases = []testCase{
	{"RunCreateRecords", idemRunCreateRecords},
	{"SameRequestIsUsed", idemSameRequestIsUsed},
	{"OtherRequestConflicts", idemOtherRequestConflicts},
	{"FailedCallRecordsNothing", idemFailedCallRecordsNothing},
	{"EventSendOnce", idemEventSendOnce},
	{"PerNamespace", idemPerNamespace},
	{"ExpireAndPurge", idemExpireAndPurge},
	{"ConcurrentDuplicates", idemConcurrentDuplicates},
	{"InvalidParams", idemInvalidParams},
	{"CancelResumeDecide", idemCancelResumeDecide},
	{"Replay", idemReplay},
	// The control plane's keyed calls (idemobjects.go).
	{"NamespaceCreate", idemNamespaceCreate},
	{"NamespaceUpdate", idemNamespaceUpdate},
	{"QueueCalls", idemQueueCalls},
	{"RunDelete", idemRunDelete},
	{"ObjectsConcurrentDuplicates", idemObjectsConcurrent},
	{"ObjectsInvalidKey", idemObjectsInvalidKey},
}

// The suite's records name their rendering (IdempotencyRecord.Renderer) as well
// as giving it (Response), as the server's routes do: a store that forwards a
// write to the process that writes its log (store/storejs, when another server
// took the writer's lease, as a loaded machine makes happen mid-case) sends the
// name, and refuses a record without one. Each is registered once, here.
var renderers = map[string]store.IdempotencyRenderer{
	// idemRecord's: 201 with the run's ID, 202 with the event's sequence
	"storetest.idem": func(_ int, result any) (int, []byte, error) {
		switch r := result.(type) {
		case *store.RunCreateResult:
			return 201, []byte(r.Run.ID), nil
		case *store.EventSendResult:
			return 202, []byte(fmt.Sprint(r.Event.Seq)), nil
		}
		return 0, nil, fmt.Errorf("unexpected result %T", result)
	},
	// typedRecord's: 200 with the Go type of the result
	"storetest.type": func(_ int, result any) (int, []byte, error) { return 200, fmt.Appendf(nil, "%T", result), nil },
	// a batch's: 200 with the number of its items
	"storetest.batch": func(_ int, result any) (int, []byte, error) {
		r, ok := result.(*store.RunsCreateResult)
		if !ok {
			return 0, nil, fmt.Errorf("unexpected result %T", result)
		}
		return 200, fmt.Appendf(nil, "%d", len(r.Items)), nil
	},
	// 201 with an empty object
	"storetest.empty": func(int, any) (int, []byte, error) { return 201, []byte(`{}`), nil },
}

func init() {
	for name, f := range renderers {
		store.RegisterIdempotencyRenderer(name, f)
	}
}

// rendered is a record of key and fingerprint fp whose response the renderer
// named renderer makes.
func rendered(key string, fp []byte, renderer string) *store.IdempotencyRecord {
	f := renderers[renderer]
	return &store.IdempotencyRecord{Key: key, Fingerprint: fp, Renderer: renderer,
		Response: func(result any) (int, []byte, error) { return f(0, result) }}
}

// idemRecord is a record of key for the request named req; its response is 201
// with the run's or the event's ID.
func idemRecord(key, req string) *store.IdempotencyRecord {
	return rendered(key, store.IdempotencyFingerprint("POST", "/v1/x", []byte(req), "ci"), "storetest.idem")
}

// createIdem creates a run with an idempotency record.
func (e *env) createIdem(rec *store.IdempotencyRecord, opts ...runOpt) (*store.RunCreateParams, error) {
	p := e.params(opts...)
	p.Idempotency = rec
	_, err := e.st.RunCreate(e.ctx, p)
	return p, err
}

func (e *env) idemGet(namespace, key string) (*store.IdempotencyEntry, error) {
	return e.st.IdempotencyGet(e.ctx, &store.IdempotencyGetParams{Namespace: namespace, Key: key})
}

// wantNoRun fails unless run id of ns does not exist.
func (e *env) wantNoRun(id string) {
	e.t.Helper()
	if _, err := e.st.RunGet(e.ctx, &store.RunGetParams{Namespace: ns, Ref: id}); !errors.Is(err, store.ErrRunNotFound) {
		e.t.Errorf("RunGet(%s) = %v, want ErrRunNotFound (nothing written)", id, err)
	}
}

func idemRunCreateRecords(t *testing.T, e *env) {
	rec := idemRecord("k1", "a")
	p, err := e.createIdem(rec)
	if err != nil {
		t.Fatalf("RunCreate with a key: %v", err)
	}
	got, err := e.idemGet(ns, "k1")
	if err != nil {
		t.Fatalf("IdempotencyGet: %v", err)
	}
	if got.Namespace != ns || got.Key != "k1" || string(got.Fingerprint) != string(rec.Fingerprint) ||
		got.Status != 201 || string(got.Body) != p.ID || !sameTime(got.CreatedAt, e.clk.Now()) {
		t.Errorf("entry = %+v, want k1 in %s: 201 %q at %v", got, ns, p.ID, e.clk.Now())
	}
	if _, err := e.idemGet(ns, "k2"); !errors.Is(err, store.ErrIdempotencyKeyNotFound) {
		t.Errorf("IdempotencyGet(unknown) = %v, want ErrIdempotencyKeyNotFound", err)
	}
	plain := &store.IdempotencyRecord{Key: "k3", Fingerprint: []byte{1}} // no Response: the result as JSON
	if _, err := e.createIdem(plain); err != nil {
		t.Fatal(err)
	}
	if got, err := e.idemGet(ns, "k3"); err != nil || got.Status != 0 || !strings.Contains(string(got.Body), `"created":true`) {
		t.Errorf("entry without Response = %+v, %v; want status 0, the result as JSON", got, err)
	}
}

func idemSameRequestIsUsed(t *testing.T, e *env) {
	if _, err := e.createIdem(idemRecord("k", "a")); err != nil {
		t.Fatal(err)
	}
	p, err := e.createIdem(idemRecord("k", "a"))
	if !errors.Is(err, store.ErrIdempotencyKeyUsed) {
		t.Fatalf("a retry with the key = %v, want ErrIdempotencyKeyUsed", err)
	}
	e.wantNoRun(p.ID)
}

func idemOtherRequestConflicts(t *testing.T, e *env) {
	if _, err := e.createIdem(idemRecord("k", "a")); err != nil {
		t.Fatal(err)
	}
	p, err := e.createIdem(idemRecord("k", "b"))
	if !errors.Is(err, store.ErrIdempotencyKeyConflict) {
		t.Fatalf("another request with the key = %v, want ErrIdempotencyKeyConflict", err)
	}
	e.wantNoRun(p.ID)
	if got, err := e.idemGet(ns, "k"); err != nil || got.Status != 201 {
		t.Errorf("the first entry after a conflict = %+v, %v; want it unchanged", got, err)
	}
}

func idemFailedCallRecordsNothing(t *testing.T, e *env) {
	first := e.create()
	_, err := e.createIdem(idemRecord("k", "a"), withWorkflowID(first.WorkflowID))
	if !errors.Is(err, store.ErrRunExists) {
		t.Fatalf("RunCreate of an active workflow ID = %v, want ErrRunExists", err)
	}
	if _, err := e.idemGet(ns, "k"); !errors.Is(err, store.ErrIdempotencyKeyNotFound) {
		t.Errorf("IdempotencyGet after a failed call = %v, want ErrIdempotencyKeyNotFound", err)
	}
	if _, err := e.createIdem(idemRecord("k", "a")); err != nil {
		t.Errorf("retrying with the key after the failure: %v", err)
	}
	_, err = e.st.EventSend(e.ctx, &store.EventSendParams{Namespace: ns, Ref: "missing", Name: "go",
		Idempotency: idemRecord("ev", "a")})
	if !errors.Is(err, store.ErrRunNotFound) {
		t.Fatalf("EventSend to a missing run = %v, want ErrRunNotFound", err)
	}
	if _, err := e.idemGet(ns, "ev"); !errors.Is(err, store.ErrIdempotencyKeyNotFound) {
		t.Errorf("IdempotencyGet after a failed send = %v, want ErrIdempotencyKeyNotFound", err)
	}
}

func idemEventSendOnce(t *testing.T, e *env) {
	run := e.create()
	p := &store.EventSendParams{Namespace: ns, Ref: run.ID, Name: "go", Idempotency: idemRecord("ev", "a")}
	res, err := e.st.EventSend(e.ctx, p)
	if err != nil {
		t.Fatalf("EventSend with a key: %v", err)
	}
	if _, err := e.st.EventSend(e.ctx, p); !errors.Is(err, store.ErrIdempotencyKeyUsed) {
		t.Fatalf("the same send again = %v, want ErrIdempotencyKeyUsed", err)
	}
	got, err := e.idemGet(ns, "ev")
	if err != nil || got.Status != 202 || string(got.Body) != fmt.Sprint(res.Event.Seq) {
		t.Errorf("entry = %+v, %v; want 202 %d", got, err, res.Event.Seq)
	}
	claimed := e.claim().Runs
	if len(claimed) != 1 || len(claimed[0].Inbox) != 1 {
		t.Fatalf("claimed %d runs, want 1 with one event in its inbox", len(claimed))
	}
}

func idemPerNamespace(t *testing.T, e *env) {
	if _, err := e.createIdem(idemRecord("k", "a")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.createIdem(idemRecord("k", "b"), withNamespace("other")); err != nil {
		t.Errorf("the key in another namespace: %v", err)
	}
	if got, err := e.idemGet("other", "k"); err != nil || got.Namespace != "other" {
		t.Errorf("IdempotencyGet(other, k) = %+v, %v", got, err)
	}
}

func idemExpireAndPurge(t *testing.T, e *env) {
	for _, k := range []string{"a", "b", "c"} {
		if _, err := e.createIdem(idemRecord(k, k)); err != nil {
			t.Fatal(err)
		}
	}
	e.clk.Advance(store.IdempotencyTTL - time.Millisecond)
	if n := e.purge(10); n != 0 {
		t.Errorf("purge before the TTL deleted %d, want 0", n)
	}
	if _, err := e.idemGet(ns, "a"); err != nil {
		t.Errorf("IdempotencyGet just before the TTL: %v", err)
	}
	e.clk.Advance(time.Millisecond)
	if _, err := e.idemGet(ns, "a"); !errors.Is(err, store.ErrIdempotencyKeyNotFound) {
		t.Errorf("IdempotencyGet at the TTL = %v, want ErrIdempotencyKeyNotFound", err)
	}
	if _, err := e.createIdem(idemRecord("a", "other")); err != nil {
		t.Errorf("reusing an expired key: %v", err) // it executes again: a fresh entry
	}
	if n1, n2, n3 := e.purge(1), e.purge(1), e.purge(1); n1 != 1 || n2 != 1 || n3 != 0 {
		t.Errorf("purges of 1 deleted %d, %d, %d; want 1, 1, 0 (b and c; a is fresh)", n1, n2, n3)
	}
	if _, err := e.idemGet(ns, "a"); err != nil {
		t.Errorf("the fresh entry of a after purging: %v", err)
	}
}

func (e *env) purge(limit int) int {
	e.t.Helper()
	n, err := e.st.IdempotencyPurge(e.ctx, &store.IdempotencyPurgeParams{Limit: limit})
	if err != nil {
		e.t.Fatalf("IdempotencyPurge: %v", err)
	}
	return n
}

// Concurrent requests with one key: exactly one executes, the others are told
// the key is used, and then read the winner's response.
func idemConcurrentDuplicates(t *testing.T, e *env) {
	const n = 8
	params := make([]*store.RunCreateParams, n)
	for i := range params {
		params[i] = e.params()
		params[i].Idempotency = idemRecord("k", "a")
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, p := range params {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = e.st.RunCreate(e.ctx, p)
		}()
	}
	wg.Wait()
	winner := ""
	for i, err := range errs {
		switch {
		case err == nil && winner == "":
			winner = params[i].ID
		case err == nil:
			t.Errorf("two requests with one key executed: %s and %s", winner, params[i].ID)
		case !errors.Is(err, store.ErrIdempotencyKeyUsed):
			t.Errorf("a duplicate failed with %v, want ErrIdempotencyKeyUsed", err)
		default:
			e.wantNoRun(params[i].ID)
		}
	}
	if got, err := e.idemGet(ns, "k"); err != nil || string(got.Body) != winner {
		t.Errorf("entry = %+v, %v; want the winner's response %q", got, err, winner)
	}
}

func idemInvalidParams(t *testing.T, e *env) {
	for name, rec := range map[string]*store.IdempotencyRecord{
		"empty key":        {Key: "", Fingerprint: []byte{1}},
		"long key":         {Key: strings.Repeat("k", store.MaxIdempotencyKeyLen+1), Fingerprint: []byte{1}},
		"no fingerprint":   {Key: "k"},
		"long fingerprint": {Key: "k", Fingerprint: make([]byte, 65)},
	} {
		p, err := e.createIdem(rec)
		if !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("%s: RunCreate = %v, want ErrInvalidParams", name, err)
		}
		e.wantNoRun(p.ID)
	}
}

// RunCancel, RunResume and ApprovalDecide record their keys too; a retry is told
// the key is used before anything else (not that the run has finished).
func idemCancelResumeDecide(t *testing.T, e *env) {
	run := e.create()
	cancel := &store.RunCancelParams{Namespace: ns, Ref: run.ID, Idempotency: &store.IdempotencyRecord{Key: "c", Fingerprint: []byte("c")}}
	if _, err := e.st.RunCancel(e.ctx, cancel); err != nil {
		t.Fatalf("RunCancel with a key: %v", err)
	}
	if _, err := e.st.RunCancel(e.ctx, cancel); !errors.Is(err, store.ErrIdempotencyKeyUsed) {
		t.Errorf("RunCancel again = %v, want ErrIdempotencyKeyUsed", err)
	}
	if got, err := e.idemGet(ns, "c"); err != nil || !strings.Contains(string(got.Body), `"status":"cancelled"`) {
		t.Errorf("entry of the cancel = %+v, %v; want the cancelled run", got, err)
	}
	cancel.Idempotency = &store.IdempotencyRecord{Key: "c2", Fingerprint: []byte("c")}
	if _, err := e.st.RunCancel(e.ctx, cancel); !errors.Is(err, store.ErrRunFinished) {
		t.Errorf("RunCancel of a finished run = %v, want ErrRunFinished", err)
	}
	if _, err := e.idemGet(ns, "c2"); !errors.Is(err, store.ErrIdempotencyKeyNotFound) {
		t.Errorf("key of a failed cancel = %v, want ErrIdempotencyKeyNotFound", err)
	}

	cr := e.start()
	e.block(cr)
	resume := &store.RunResumeParams{Namespace: ns, Ref: cr.Run.ID, Idempotency: &store.IdempotencyRecord{Key: "r", Fingerprint: []byte("r")}}
	if _, err := e.st.RunResume(e.ctx, resume); err != nil {
		t.Fatalf("RunResume with a key: %v", err)
	}
	if _, err := e.st.RunResume(e.ctx, resume); !errors.Is(err, store.ErrIdempotencyKeyUsed) {
		t.Errorf("RunResume again = %v, want ErrIdempotencyKeyUsed", err)
	}

	cr = e.claimOne(cr.Run.ID)
	e.awaitApproval(cr, e.request("ap-1"))
	decide := &store.ApprovalDecideParams{Namespace: ns, ID: "ap-1", Approve: true, Principal: "alice",
		Idempotency: &store.IdempotencyRecord{Key: "d", Fingerprint: []byte("alice")}}
	if _, err := e.st.ApprovalDecide(e.ctx, decide); err != nil {
		t.Fatalf("ApprovalDecide with a key: %v", err)
	}
	other := *decide
	other.Principal, other.Idempotency = "bob", &store.IdempotencyRecord{Key: "d", Fingerprint: []byte("bob")}
	if _, err := e.st.ApprovalDecide(e.ctx, &other); !errors.Is(err, store.ErrIdempotencyKeyConflict) {
		t.Errorf("another decision with the key = %v, want ErrIdempotencyKeyConflict", err)
	}
	if _, err := e.st.ApprovalDecide(e.ctx, decide); !errors.Is(err, store.ErrIdempotencyKeyUsed) {
		t.Errorf("the decision again = %v, want ErrIdempotencyKeyUsed", err)
	}
	if a := e.approval("ap-1"); a.Principal != "alice" {
		t.Errorf("approval decided by %q, want alice", a.Principal)
	}
}

// IdempotencyReplay tells a server what to do with a request's key.
func idemReplay(t *testing.T, e *env) {
	rec := idemRecord("k", "a")
	if got, err := store.IdempotencyReplay(e.ctx, e.st, ns, rec); got != nil || err != nil {
		t.Fatalf("IdempotencyReplay of a new key = %+v, %v; want nil, nil (execute)", got, err)
	}
	p, err := e.createIdem(rec)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := store.IdempotencyReplay(e.ctx, e.st, ns, rec); err != nil || got.Status != 201 || string(got.Body) != p.ID {
		t.Errorf("IdempotencyReplay of the same request = %+v, %v; want its response", got, err)
	}
	if _, err := store.IdempotencyReplay(e.ctx, e.st, ns, idemRecord("k", "b")); !errors.Is(err, store.ErrIdempotencyKeyConflict) {
		t.Errorf("IdempotencyReplay of another request = %v, want ErrIdempotencyKeyConflict", err)
	}
}
