package server

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
)

// Namespaces and queues through the API on SQLite and Postgres: create, read,
// change, pause and resume; a paused queue keeps its runs pending until resumed;
// bad input is refused with its code and changes nothing; the Go client over HTTP
// does the same.
func TestAPIQueues(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, url(t))
			const base = "/v1/namespaces/default"
			// Queues need their namespace's record; default has one from the start.
			e.do("POST", "/v1/namespaces/tenant-a/queues", "admin", map[string]any{"name": "default"}).problem(t, 404, "namespace_not_found")
			var ns store.Namespace
			e.do("POST", "/v1/namespaces", "admin", map[string]any{"name": "tenant-a", "retention": "48h"}).want(t, 201).decode(t, &ns)
			if ns.Retention != store.Duration(48*time.Hour) || ns.DefaultQueue != "default" {
				t.Fatalf("created namespace %+v", ns)
			}
			e.do("POST", "/v1/namespaces", "admin", map[string]any{"name": "default"}).problem(t, 409, "namespace_exists")
			e.do("GET", base, "reader", nil).want(t, 200).decode(t, &ns)
			if ns.Retention != store.DefaultRetention || ns.DefaultQueue != "default" {
				t.Fatalf("namespace default %+v, want the defaults", ns)
			}
			e.do("PATCH", base, "admin", map[string]any{"payload_limit": 4096}).want(t, 200).decode(t, &ns)
			if ns.PayloadLimit != 4096 || ns.Retention != store.DefaultRetention {
				t.Fatalf("updated namespace %+v", ns)
			}
			var nl NamespaceList
			e.do("GET", "/v1/namespaces", "admin", nil).want(t, 200).decode(t, &nl)
			if len(nl.Namespaces) != 2 || nl.Namespaces[0].Name != "default" || nl.Namespaces[1].Name != "tenant-a" {
				t.Fatalf("namespaces %+v", nl.Namespaces)
			}

			var q store.Queue
			e.do("POST", base+"/queues", "admin", map[string]any{"name": "default", "concurrency_limit": 4,
				"rate_per_second": 100.5, "rate_burst": 10, "retry": map[string]any{"max_attempts": 2, "initial_backoff": "1s"}}).
				want(t, 201).decode(t, &q)
			if q.ConcurrencyLimit != 4 || q.RatePerSecond != 100.5 || q.RateBurst != 10 || q.Retry == nil ||
				q.Retry.InitialBackoff != store.Duration(time.Second) || q.Paused {
				t.Fatalf("created queue %+v", q)
			}
			e.do("POST", base+"/queues", "admin", map[string]any{"name": "default"}).problem(t, 409, "queue_exists")
			e.do("PATCH", base+"/queues/default", "admin", map[string]any{"key_limit": 1}).want(t, 200).decode(t, &q)
			if q.KeyLimit != 1 || q.ConcurrencyLimit != 4 {
				t.Fatalf("updated queue %+v", q)
			}
			var ql QueueList
			e.do("GET", base+"/queues", "reader", nil).want(t, 200).decode(t, &ql)
			if len(ql.Queues) != 1 || ql.Queues[0].KeyLimit != 1 {
				t.Fatalf("queues %+v", ql.Queues)
			}

			// Pause: a run started is accepted and waits; resume: it runs.
			e.do("POST", base+"/queues/default/pause", "admin", nil).want(t, 200).decode(t, &q)
			if !q.Paused {
				t.Fatalf("paused queue %+v", q)
			}
			e.do("POST", base+"/queues/default/pause", "admin", nil).problem(t, 409, "queue_state")
			run := e.start("echo", map[string]any{"x": 1}, map[string]any{"concurrency_key": "customer-1"})
			time.Sleep(300 * time.Millisecond) // several polls of the worker
			var got trellis.Run
			e.do("GET", base+"/runs/"+run.ID, "reader", nil).want(t, 200).decode(t, &got)
			if got.Status != trellis.StatusPending {
				t.Fatalf("run in a paused queue is %s, want pending", got.Status)
			}
			e.do("POST", base+"/queues/default/resume", "admin", nil).want(t, 200).decode(t, &q)
			e.do("POST", base+"/queues/default/resume", "admin", nil).problem(t, 409, "queue_state")
			if done := e.waitRun(run.ID); done.Status != trellis.StatusSucceeded {
				t.Fatalf("run after resume: %s", done.Status)
			}

			// Bad input: a clear error each time, nothing changed.
			for _, c := range []struct {
				method, path string
				body         any
				status       int
				code         string
			}{
				{"POST", "/v1/namespaces", map[string]any{"name": "__system__"}, 400, "invalid_argument"},
				{"POST", "/v1/namespaces", map[string]any{"name": "bad name"}, 400, "invalid_argument"},
				{"POST", "/v1/namespaces", map[string]any{"name": "x", "retention": "-1h"}, 400, "invalid_argument"},
				{"POST", "/v1/namespaces", map[string]any{"name": "x", "retention": "soon"}, 400, "invalid_argument"},
				{"POST", "/v1/namespaces", map[string]any{"name": "x", "payload_limit": 0, "default_queue": "a b"}, 400, "invalid_argument"},
				{"PATCH", base, map[string]any{"payload_limit": 0}, 400, "invalid_argument"},
				{"PATCH", base, map[string]any{"retention": "0s"}, 400, "invalid_argument"},
				{"PATCH", "/v1/namespaces/nope", map[string]any{"payload_limit": 1}, 404, "namespace_not_found"},
				{"GET", "/v1/namespaces/nope", nil, 404, "namespace_not_found"},
				{"GET", "/v1/namespaces/__system__", nil, 403, "permission_denied"},
				{"POST", "/v1/namespaces/__system__/queues", map[string]any{"name": "q"}, 403, "permission_denied"},
				{"POST", base + "/queues", map[string]any{"name": "q", "concurrency_limit": 0}, 400, "invalid_argument"},
				{"POST", base + "/queues", map[string]any{"name": "q", "key_limit": -1}, 400, "invalid_argument"},
				{"POST", base + "/queues", map[string]any{"name": "q", "rate_per_second": -2}, 400, "invalid_argument"},
				{"POST", base + "/queues", map[string]any{"name": "q", "rate_burst": 0}, 400, "invalid_argument"},
				{"POST", base + "/queues", map[string]any{"name": "q", "bogus": 1}, 400, "invalid_argument"},
				{"POST", base + "/queues", map[string]any{"name": ""}, 400, "invalid_argument"},
				{"POST", "/v1/namespaces/nope/queues", map[string]any{"name": "q"}, 404, "namespace_not_found"},
				{"PATCH", base + "/queues/default", map[string]any{"concurrency_limit": -1}, 400, "invalid_argument"},
				{"PATCH", base + "/queues/nope", map[string]any{"concurrency_limit": 1}, 404, "queue_not_found"},
				{"GET", base + "/queues/nope", nil, 404, "queue_not_found"},
				{"POST", base + "/queues/nope/pause", nil, 404, "queue_not_found"},
				{"GET", "/v1/namespaces/nope/queues", nil, 404, "namespace_not_found"},
			} {
				p := e.do(c.method, c.path, "admin", c.body).problem(t, c.status, c.code)
				if p.Detail == "" {
					t.Errorf("%s %s: problem without detail", c.method, c.path)
				}
			}
			e.do("GET", base+"/queues", "reader", nil).want(t, 200).decode(t, &ql)
			if len(ql.Queues) != 1 || ql.Queues[0].ConcurrencyLimit != 4 || ql.Queues[0].KeyLimit != 1 || ql.Queues[0].Paused {
				t.Fatalf("queues after bad input %+v", ql.Queues)
			}
			e.do("GET", "/v1/namespaces", "admin", nil).want(t, 200).decode(t, &nl)
			if len(nl.Namespaces) != 2 || nl.Namespaces[0].PayloadLimit != 4096 || nl.Namespaces[1].PayloadLimit != 0 {
				t.Fatalf("namespaces after bad input %+v", nl.Namespaces)
			}
			// Roles: a reader reads but changes nothing; a producer does neither.
			e.do("POST", base+"/queues/default/pause", "reader", nil).problem(t, 403, "permission_denied")
			e.do("GET", base+"/queues/default", "producer", nil).problem(t, 403, "permission_denied")

			// The Go client over HTTP.
			c, err := trellis.Open(context.Background(), trellis.Config{Server: e.base, Token: "admin"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx := context.Background()
			if _, err := c.PauseQueue(ctx, "default"); err != nil {
				t.Fatal(err)
			}
			// The errors say once what failed: the server's detail names the
			// operation already, and the client does not name it again.
			if _, err := c.PauseQueue(ctx, "default"); !errors.Is(err, trellis.ErrQueueState) || onceIn(err, `pausing queue "default"`) != 1 {
				t.Fatalf("second pause over HTTP: %v, want ErrQueueState, the operation named once", err)
			}
			if _, err := c.GetQueue(ctx, "nope"); !errors.Is(err, trellis.ErrQueueNotFound) || onceIn(err, `getting queue "nope"`) != 1 {
				t.Fatalf("unknown queue over HTTP: %v, want ErrQueueNotFound, the operation named once", err)
			}
			if _, err := c.GetNamespace(ctx, "nope"); !errors.Is(err, trellis.ErrNamespaceNotFound) || onceIn(err, `getting namespace "nope"`) != 1 {
				t.Fatalf("unknown namespace over HTTP: %v, want ErrNamespaceNotFound, the operation named once", err)
			}
			if _, err := c.UpdateNamespace(ctx, trellis.NamespaceUpdate{Name: "nope"}); !errors.Is(err, trellis.ErrNamespaceNotFound) || onceIn(err, `updating namespace "nope"`) != 1 {
				t.Fatalf("updating an unknown namespace over HTTP: %v, want ErrNamespaceNotFound, the operation named once", err)
			}
			if _, err := c.CreateQueue(ctx, "default", trellis.QueueSettings{}); !errors.Is(err, trellis.ErrQueueExists) {
				t.Fatalf("queue created twice over HTTP: %v", err)
			}
			two := 2
			q2, err := c.CreateQueue(ctx, "bulk", trellis.QueueSettings{ConcurrencyLimit: &two})
			if err != nil || q2.ConcurrencyLimit != 2 {
				t.Fatalf("CreateQueue over HTTP = %+v, %v", q2, err)
			}
			q2, err = c.UpdateQueue(ctx, "bulk", trellis.QueueSettings{KeyLimit: &two})
			if err != nil || q2.KeyLimit != 2 || q2.ConcurrencyLimit != 2 {
				t.Fatalf("UpdateQueue over HTTP = %+v, %v", q2, err)
			}
			qs, err := c.ListQueues(ctx)
			if err != nil || len(qs) != 2 || !qs[1].Paused {
				t.Fatalf("ListQueues over HTTP = %+v, %v", qs, err)
			}
			if _, err := c.ResumeQueue(ctx, "default"); err != nil {
				t.Fatal(err)
			}
			day := trellis.Duration(24 * time.Hour)
			n, err := c.UpdateNamespace(ctx, trellis.NamespaceUpdate{Name: "default", Retention: &day})
			if err != nil || n.Retention != day {
				t.Fatalf("UpdateNamespace over HTTP = %+v, %v", n, err)
			}
			if _, err := c.CreateNamespace(ctx, trellis.NamespaceOptions{Name: "tenant-b"}); err != nil {
				t.Fatal(err)
			}
			list, err := c.ListNamespaces(ctx)
			if err != nil || len(list) != 3 || list[2].Name != "tenant-b" {
				t.Fatalf("ListNamespaces over HTTP = %+v, %v", list, err)
			}
		})
	}
}

// onceIn counts the times s occurs in err's message.
func onceIn(err error, s string) int {
	if err == nil {
		return 0
	}
	return strings.Count(err.Error(), s)
}
