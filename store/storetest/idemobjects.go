package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// The keyed calls of the control plane: namespaces, queues and run deletion
// record their idempotency keys as the run calls do (idempotency.go). A retry
// with the key is told the key is used before anything else, never the error
// doing the change again would get (exists, already paused, not found).

// typedRecord is a record of key for the request named req whose response is
// 200 with the Go type of the call's result, so a case can check what the
// store renders it from.
func typedRecord(key, req string) *store.IdempotencyRecord {
	return rendered(key, []byte(req), "storetest.type")
}

// wantEntry fails unless key is recorded in namespace with the response body.
func (e *env) wantEntry(namespace, key, body string) {
	e.t.Helper()
	got, err := e.idemGet(namespace, key)
	if err != nil || got.Namespace != namespace || got.Status != 200 || string(got.Body) != body {
		e.t.Errorf("entry of %s in %s = %+v, %v; want 200 %q", key, namespace, got, err, body)
	}
}

// wantNoEntry fails unless key is not recorded in namespace.
func (e *env) wantNoEntry(namespace, key string) {
	e.t.Helper()
	if _, err := e.idemGet(namespace, key); !errors.Is(err, store.ErrIdempotencyKeyNotFound) {
		e.t.Errorf("IdempotencyGet(%s, %s) = %v, want ErrIdempotencyKeyNotFound (nothing recorded)", namespace, key, err)
	}
}

// NamespaceCreate keeps its key in the namespace it creates.
func idemNamespaceCreate(t *testing.T, e *env) {
	p := &store.NamespaceCreateParams{Name: "made", Idempotency: typedRecord("k", "a")}
	if _, err := e.st.NamespaceCreate(e.ctx, p); err != nil {
		t.Fatalf("NamespaceCreate with a key: %v", err)
	}
	e.wantEntry("made", "k", "*store.Namespace")
	e.wantNoEntry(ns, "k")
	_, err := e.st.NamespaceCreate(e.ctx, p)
	wantErr(t, "NamespaceCreate again", err, store.ErrIdempotencyKeyUsed)
	other := &store.NamespaceCreateParams{Name: "made", Retention: store.Duration(time.Hour), Idempotency: typedRecord("k", "b")}
	_, err = e.st.NamespaceCreate(e.ctx, other)
	wantErr(t, "NamespaceCreate with another request's key", err, store.ErrIdempotencyKeyConflict)
	if got, err := e.st.NamespaceGet(e.ctx, &store.NamespaceGetParams{Name: "made"}); err != nil || got.Retention != store.DefaultRetention {
		t.Errorf("namespace after the conflict = %+v, %v; want the first creation's", got, err)
	}
	_, err = e.st.NamespaceCreate(e.ctx, &store.NamespaceCreateParams{Name: "made", Idempotency: typedRecord("k2", "a")})
	wantErr(t, "NamespaceCreate of an existing namespace", err, store.ErrNamespaceExists)
	e.wantNoEntry("made", "k2")
}

// NamespaceUpdate changes the namespace once per key.
func idemNamespaceUpdate(t *testing.T, e *env) {
	e.mkNamespace(ns)
	hour := store.Duration(time.Hour)
	p := &store.NamespaceUpdateParams{Name: ns, Retention: &hour, Idempotency: typedRecord("u", "a")}
	first, err := e.st.NamespaceUpdate(e.ctx, p)
	if err != nil {
		t.Fatalf("NamespaceUpdate with a key: %v", err)
	}
	e.wantEntry(ns, "u", "*store.Namespace")
	e.clk.Advance(time.Second)
	_, err = e.st.NamespaceUpdate(e.ctx, p)
	wantErr(t, "NamespaceUpdate again", err, store.ErrIdempotencyKeyUsed)
	if got, err := e.st.NamespaceGet(e.ctx, &store.NamespaceGetParams{Name: ns}); err != nil || !sameTime(got.UpdatedAt, first.UpdatedAt) {
		t.Errorf("namespace after the retry = %+v, %v; want it unchanged since %v", got, err, first.UpdatedAt)
	}
	_, err = e.st.NamespaceUpdate(e.ctx, &store.NamespaceUpdateParams{Name: "nowhere", Retention: &hour, Idempotency: typedRecord("u2", "a")})
	wantErr(t, "NamespaceUpdate of an unknown namespace", err, store.ErrNamespaceNotFound)
	e.wantNoEntry("nowhere", "u2")
}

// QueueCreate, QueueUpdate and QueueSetPaused: a retry is told the key is
// used, not that the queue exists or is in that state already.
func idemQueueCalls(t *testing.T, e *env) {
	e.mkNamespace(ns)
	create := &store.QueueCreateParams{Namespace: ns, Name: queue, Idempotency: typedRecord("c", "c")}
	if _, err := e.st.QueueCreate(e.ctx, create); err != nil {
		t.Fatalf("QueueCreate with a key: %v", err)
	}
	e.wantEntry(ns, "c", "*store.Queue")
	_, err := e.st.QueueCreate(e.ctx, create)
	wantErr(t, "QueueCreate again", err, store.ErrIdempotencyKeyUsed)

	update := &store.QueueUpdateParams{Namespace: ns, Name: queue, QueueSettings: store.QueueSettings{ConcurrencyLimit: intp(2)},
		Idempotency: typedRecord("u", "u")}
	if _, err := e.st.QueueUpdate(e.ctx, update); err != nil {
		t.Fatalf("QueueUpdate with a key: %v", err)
	}
	e.wantEntry(ns, "u", "*store.Queue")
	_, err = e.st.QueueUpdate(e.ctx, update)
	wantErr(t, "QueueUpdate again", err, store.ErrIdempotencyKeyUsed)

	pause := &store.QueueSetPausedParams{Namespace: ns, Name: queue, Paused: true, Idempotency: typedRecord("p", "pause")}
	if _, err := e.st.QueueSetPaused(e.ctx, pause); err != nil {
		t.Fatalf("QueueSetPaused with a key: %v", err)
	}
	e.wantEntry(ns, "p", "*store.Queue")
	_, err = e.st.QueueSetPaused(e.ctx, pause)
	wantErr(t, "QueueSetPaused again", err, store.ErrIdempotencyKeyUsed)
	resume := &store.QueueSetPausedParams{Namespace: ns, Name: queue, Idempotency: typedRecord("p", "resume")}
	_, err = e.st.QueueSetPaused(e.ctx, resume)
	wantErr(t, "QueueSetPaused with another request's key", err, store.ErrIdempotencyKeyConflict)
	if q, err := e.st.QueueGet(e.ctx, &store.QueueGetParams{Namespace: ns, Name: queue}); err != nil || !q.Paused || q.ConcurrencyLimit != 2 {
		t.Errorf("queue = %+v, %v; want paused, concurrency limit 2", q, err)
	}
	pause.Idempotency = typedRecord("p2", "pause")
	_, err = e.st.QueueSetPaused(e.ctx, pause)
	wantErr(t, "QueueSetPaused of a paused queue", err, store.ErrQueueState)
	e.wantNoEntry(ns, "p2")
	_, err = e.st.QueueCreate(e.ctx, &store.QueueCreateParams{Namespace: ns, Name: queue, Idempotency: typedRecord("c2", "c")})
	wantErr(t, "QueueCreate of an existing queue", err, store.ErrQueueExists)
	e.wantNoEntry(ns, "c2")
}

// RunDelete's key outlives the run it deleted: a retry is told the key is
// used, not that the run is not found.
func idemRunDelete(t *testing.T, e *env) {
	run := e.cancelled()
	p := &store.RunDeleteParams{Namespace: ns, Ref: run.ID, Idempotency: typedRecord("d", "d")}
	if _, err := e.st.RunDelete(e.ctx, p); err != nil {
		t.Fatalf("RunDelete with a key: %v", err)
	}
	e.wantNoRun(run.ID)
	e.wantEntry(ns, "d", "<nil>")
	_, err := e.st.RunDelete(e.ctx, p)
	wantErr(t, "RunDelete again", err, store.ErrIdempotencyKeyUsed)
	_, err = e.st.RunDelete(e.ctx, &store.RunDeleteParams{Namespace: ns, Ref: run.ID, Idempotency: typedRecord("d", "other")})
	wantErr(t, "RunDelete with another request's key", err, store.ErrIdempotencyKeyConflict)

	active := e.create()
	_, err = e.st.RunDelete(e.ctx, &store.RunDeleteParams{Namespace: ns, Ref: active.ID, Idempotency: typedRecord("d2", "d")})
	wantErr(t, "RunDelete of an active run", err, store.ErrRunActive)
	e.wantNoEntry(ns, "d2")
	e.wantStatus(active.ID, store.StatusPending)
}

// cancelled creates a run and cancels it: a finished run.
func (e *env) cancelled() *store.Run {
	e.t.Helper()
	run := e.create()
	if _, err := e.st.RunCancel(e.ctx, &store.RunCancelParams{Namespace: ns, Ref: run.ID}); err != nil {
		e.t.Fatalf("RunCancel(%s): %v", run.ID, err)
	}
	return run
}

// Concurrent pauses and deletions with one key each: exactly one of each
// executes, the others are told the key is used (not ErrQueueState, not
// ErrRunNotFound).
func idemObjectsConcurrent(t *testing.T, e *env) {
	e.mkNamespace(ns)
	e.mkQueue(store.QueueCreateParams{})
	run := e.cancelled()
	const n = 6
	calls := map[string]func() error{
		"QueueSetPaused": func() error {
			_, err := e.st.QueueSetPaused(e.ctx, &store.QueueSetPausedParams{Namespace: ns, Name: queue, Paused: true,
				Idempotency: typedRecord("pause", "a")})
			return err
		},
		"RunDelete": func() error {
			_, err := e.st.RunDelete(e.ctx, &store.RunDeleteParams{Namespace: ns, Ref: run.ID, Idempotency: typedRecord("delete", "a")})
			return err
		},
	}
	for name, call := range calls {
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range errs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = call()
			}()
		}
		wg.Wait()
		executed := 0
		for _, err := range errs {
			switch {
			case err == nil:
				executed++
			case !errors.Is(err, store.ErrIdempotencyKeyUsed):
				t.Errorf("%s: a duplicate failed with %v, want ErrIdempotencyKeyUsed", name, err)
			}
		}
		if executed != 1 {
			t.Errorf("%s: %d of %d duplicates executed, want 1", name, executed, n)
		}
	}
}

// A malformed key is refused by every keyed call of the control plane, which
// then changes nothing.
func idemObjectsInvalidKey(t *testing.T, e *env) {
	e.mkNamespace(ns)
	e.mkQueue(store.QueueCreateParams{})
	run := e.cancelled()
	bad := &store.IdempotencyRecord{Key: "k"} // no fingerprint
	for name, call := range map[string]func() error{
		"NamespaceCreate": func() error {
			_, err := e.st.NamespaceCreate(e.ctx, &store.NamespaceCreateParams{Name: "made", Idempotency: bad})
			return err
		},
		"NamespaceUpdate": func() error {
			_, err := e.st.NamespaceUpdate(e.ctx, &store.NamespaceUpdateParams{Name: ns, PayloadLimit: intp(10), Idempotency: bad})
			return err
		},
		"QueueCreate": func() error {
			_, err := e.st.QueueCreate(e.ctx, &store.QueueCreateParams{Namespace: ns, Name: "other", Idempotency: bad})
			return err
		},
		"QueueUpdate": func() error {
			_, err := e.st.QueueUpdate(e.ctx, &store.QueueUpdateParams{Namespace: ns, Name: queue,
				QueueSettings: store.QueueSettings{KeyLimit: intp(1)}, Idempotency: bad})
			return err
		},
		"QueueSetPaused": func() error {
			_, err := e.st.QueueSetPaused(e.ctx, &store.QueueSetPausedParams{Namespace: ns, Name: queue, Paused: true, Idempotency: bad})
			return err
		},
		"RunDelete": func() error {
			_, err := e.st.RunDelete(e.ctx, &store.RunDeleteParams{Namespace: ns, Ref: run.ID, Idempotency: bad})
			return err
		},
	} {
		wantErr(t, name+" with a malformed key", call(), store.ErrInvalidParams)
	}
	if _, err := e.st.NamespaceGet(e.ctx, &store.NamespaceGetParams{Name: "made"}); !errors.Is(err, store.ErrNamespaceNotFound) {
		t.Errorf("NamespaceGet(made) = %v, want ErrNamespaceNotFound", err)
	}
	if got, err := e.st.NamespaceGet(e.ctx, &store.NamespaceGetParams{Name: ns}); err != nil || got.PayloadLimit != 0 {
		t.Errorf("namespace = %+v, %v; want it unchanged", got, err)
	}
	if q, err := e.st.QueueGet(e.ctx, &store.QueueGetParams{Namespace: ns, Name: queue}); err != nil || q.Paused || q.KeyLimit != 0 {
		t.Errorf("queue = %+v, %v; want it unchanged", q, err)
	}
	if _, err := e.st.QueueGet(e.ctx, &store.QueueGetParams{Namespace: ns, Name: "other"}); !errors.Is(err, store.ErrQueueNotFound) {
		t.Errorf("QueueGet(other) = %v, want ErrQueueNotFound", err)
	}
	e.wantStatus(run.ID, store.StatusCancelled)
}
