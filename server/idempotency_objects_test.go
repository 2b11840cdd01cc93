package server

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
)

// A DELETE of a run retried with its key after the run is gone gets the first
// 204 again, not 404; without the key, or with a key no request used, it is
// 404; the key of another request is a conflict.
func TestIdempotentDeleteRun(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newWalkEnv(t, url(t))
			path := runsPath + "/" + e.finishedRun()
			e.keyed("DELETE", path, "admin", "del-1", nil).want(t, 204).replayed(t, false)
			e.keyed("DELETE", path, "admin", "del-1", nil).want(t, 204).replayed(t, true)
			e.do("DELETE", path, "admin", nil).problem(t, 404, "run_not_found")
			e.keyed("DELETE", path, "admin", "del-2", nil).problem(t, 404, "run_not_found")
			e.keyed("DELETE", path, "admin2", "del-1", nil).problem(t, 422, "idempotency_key_conflict")
			e.keyed("DELETE", path, "producer", "del-1", nil).problem(t, 403, "permission_denied") // no admin role: the key is not looked at
			// A key recorded by another route is a conflict too, before the run is read.
			other := runsPath + "/" + e.finishedRun()
			e.keyed("DELETE", other, "admin", "del-1", nil).problem(t, 422, "idempotency_key_conflict")
			e.do("GET", other, "reader", nil).want(t, 200)
		})
	}
}

// Queue and namespace changes retried with their key answer their first
// response instead of queue_state, queue_exists or namespace_exists; the key
// of a namespace creation is kept in the namespace it creates.
func TestIdempotentQueuesAndNamespaces(t *testing.T) {
	e := newWalkEnv(t, storeURLs(t)["sqlite"](t))
	queues := "/v1/namespaces/default/queues"
	first := e.keyed("POST", queues, "admin", "q-create", map[string]any{"name": "mail"}).want(t, 201).replayed(t, false)
	e.keyed("POST", queues, "admin", "q-create", map[string]any{"name": "mail"}).same(t, first)
	e.do("POST", queues, "admin", map[string]any{"name": "mail"}).problem(t, 409, "queue_exists")

	pause := e.keyed("POST", queues+"/mail/pause", "admin", "q-pause", nil).want(t, 200).replayed(t, false)
	e.keyed("POST", queues+"/mail/pause", "admin", "q-pause", nil).same(t, pause)
	e.do("POST", queues+"/mail/pause", "admin", nil).problem(t, 409, "queue_state")
	e.keyed("POST", queues+"/mail/resume", "admin", "q-pause", nil).problem(t, 422, "idempotency_key_conflict")
	var q store.Queue
	e.do("GET", queues+"/mail", "reader", nil).want(t, 200).decode(t, &q)
	if !q.Paused {
		t.Fatalf("queue after a conflicting resume: %+v, want paused", q)
	}

	patch := e.keyed("PATCH", queues+"/mail", "admin", "q-patch", map[string]any{"concurrency_limit": 2}).want(t, 200)
	e.keyed("PATCH", queues+"/mail", "admin", "q-patch", map[string]any{"concurrency_limit": 2}).same(t, patch)
	e.keyed("PATCH", queues+"/mail", "admin", "q-patch", map[string]any{"concurrency_limit": 3}).problem(t, 422, "idempotency_key_conflict")

	ns := e.keyed("POST", "/v1/namespaces", "admin", "ns-create", map[string]any{"name": "shop"}).want(t, 201).replayed(t, false)
	e.keyed("POST", "/v1/namespaces", "admin", "ns-create", map[string]any{"name": "shop"}).same(t, ns)
	e.do("POST", "/v1/namespaces", "admin", map[string]any{"name": "shop"}).problem(t, 409, "namespace_exists")
	if got, err := e.st.IdempotencyGet(context.Background(), &store.IdempotencyGetParams{Namespace: "shop", Key: "ns-create"}); err != nil || got.Status != 201 {
		t.Fatalf("the creation's key in namespace shop: %+v, %v", got, err)
	}
	// Keys are per namespace, and this route's namespace is the one it creates:
	// the key creating another namespace is that namespace's key.
	e.keyed("POST", "/v1/namespaces", "admin", "ns-create", map[string]any{"name": "shop2"}).want(t, 201).replayed(t, false)
	// In namespace shop the key is taken: another request with it is a conflict.
	e.keyed("PATCH", "/v1/namespaces/shop", "admin", "ns-create", map[string]any{"payload_limit": 10}).problem(t, 422, "idempotency_key_conflict")
	upd := e.keyed("PATCH", "/v1/namespaces/shop", "admin", "ns-patch", map[string]any{"payload_limit": 10}).want(t, 200)
	e.keyed("PATCH", "/v1/namespaces/shop", "admin", "ns-patch", map[string]any{"payload_limit": 10}).same(t, upd)
	e.keyed("PATCH", "/v1/namespaces/shop", "admin", "ns-patch", map[string]any{"payload_limit": 20}).problem(t, 422, "idempotency_key_conflict")
	// A malformed name is refused before any key is kept.
	e.keyed("POST", "/v1/namespaces", "admin", "ns-bad", map[string]any{"name": "no spaces"}).problem(t, 400, "invalid_argument")
}

// The token routes ignore a key, as documented: a retried create is
// token_exists.
func TestTokenRoutesIgnoreKeys(t *testing.T) {
	e := newWalkEnv(t, storeURLs(t)["sqlite"](t))
	body := map[string]any{"name": "ci", "grants": []map[string]any{{"role": "reader", "namespace": "default"}}}
	e.keyed("POST", "/v1/tokens", "admin", "tok", body).want(t, 201).replayed(t, false)
	e.keyed("POST", "/v1/tokens", "admin", "tok", body).problem(t, 409, "token_exists")
}

// The Go client through a server that loses the first answer of every
// mutating call: the client retries with the call's key and gets the first
// answer, where a retry without it would be refused (exists, not found, state).
func TestClientRetriesAfterLostAnswer(t *testing.T) {
	e := newWalkEnv(t, storeURLs(t)["sqlite"](t))
	door := lossyDoor(t, e.srv.Handler())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := trellis.Open(ctx, trellis.Config{Server: door.URL, Token: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	limit := 2
	steps := []struct {
		name string
		call func() error
	}{
		{"CreateNamespace", func() error { _, err := c.CreateNamespace(ctx, trellis.NamespaceOptions{Name: "lossy"}); return err }},
		{"UpdateNamespace", func() error {
			_, err := c.UpdateNamespace(ctx, trellis.NamespaceUpdate{Name: "lossy", PayloadLimit: &limit})
			return err
		}},
		{"CreateQueue", func() error { _, err := c.CreateQueue(ctx, "lq", trellis.QueueSettings{}); return err }},
		{"UpdateQueue", func() error {
			_, err := c.UpdateQueue(ctx, "lq", trellis.QueueSettings{ConcurrencyLimit: &limit})
			return err
		}},
		{"PauseQueue", func() error { _, err := c.PauseQueue(ctx, "lq"); return err }},
		{"ResumeQueue", func() error { _, err := c.ResumeQueue(ctx, "lq"); return err }},
		{"CreateSchedule", func() error {
			_, err := c.CreateSchedule(ctx, "ls", trellis.ScheduleSpec{Workflow: "echo", Cron: "@hourly"})
			return err
		}},
		{"UpdateSchedule", func() error {
			_, err := c.UpdateSchedule(ctx, "ls", trellis.ScheduleSpec{Workflow: "echo", Cron: "@daily"})
			return err
		}},
		{"DeleteSchedule", func() error { return c.DeleteSchedule(ctx, "ls") }},
		{"StartCancelDelete", func() error {
			run, err := c.StartRaw(ctx, "nobody-serves", nil, trellis.StartOptions{ID: "lossy-run"})
			if err != nil {
				return err
			}
			if err := c.Cancel(ctx, run.ID); err != nil {
				return err
			}
			return c.Delete(ctx, run.ID)
		}},
	}
	for _, s := range steps {
		if err := s.call(); err != nil {
			t.Fatalf("%s with its first answer lost: %v", s.name, err)
		}
	}
	if q, err := c.GetQueue(ctx, "lq"); err != nil || q.Paused || q.ConcurrencyLimit != 2 {
		t.Fatalf("queue lq: %+v, %v", q, err)
	}
	if _, err := c.Get(ctx, "lossy-run"); !errors.Is(err, trellis.ErrRunNotFound) {
		t.Fatalf("the deleted run: %v, want ErrRunNotFound", err)
	}
	if _, err := c.GetSchedule(ctx, "ls"); !errors.Is(err, trellis.ErrScheduleNotFound) {
		t.Fatalf("the deleted schedule: %v, want ErrScheduleNotFound", err)
	}
}

// lossyDoor serves h, but the first time it sees each mutating call (method
// and path) it lets h execute it and then drops the connection instead of
// answering: the answer is lost after the change is made.
func lossyDoor(t *testing.T, h http.Handler) *httptest.Server {
	var (
		mu   sync.Mutex
		seen = map[string]bool{}
	)
	door := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		call := r.Method + " " + r.URL.Path
		mu.Lock()
		first := r.Method != http.MethodGet && !seen[call]
		seen[call] = true
		mu.Unlock()
		if !first {
			h.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(httptest.NewRecorder(), r)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		conn.Close()
	}))
	t.Cleanup(door.Close)
	return door
}
