package server

import (
	"fmt"
	"testing"

	"github.com/trellis-dev/trellis"
)

// POST runs:batch starts many runs in one call, each with its own outcome;
// bad input starts nothing.
func TestAPIStartMany(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, url(t))
			existing := e.start("nobody-serves", nil, map[string]any{"id": "taken"})
			var runs []any
			for i := range 5 {
				runs = append(runs, map[string]any{"workflow": "echo", "input": map[string]any{"n": i}})
			}
			runs = append(runs,
				map[string]any{"workflow": "nobody-serves", "id": "taken"},
				map[string]any{"workflow": "nobody-serves", "id": "taken", "reuse": "return_existing"},
				map[string]any{"workflow": "nobody-serves", "id": "q1-run", "queue": "q1"})
			before := e.runCount()
			var res trellis.StartManyResponse
			e.do("POST", "/v1/namespaces/default/runs:batch", "producer", map[string]any{"runs": runs}).want(t, 200).decode(t, &res)
			if len(res.Results) != 8 {
				t.Fatalf("%d results, want 8", len(res.Results))
			}
			for i := range 5 {
				r := res.Results[i]
				if !r.Created || r.Run == nil || r.Error != nil {
					t.Fatalf("result %d = %+v", i, r)
				}
				if done := e.waitRun(r.Run.ID); string(done.Output) != fmt.Sprintf(`{"n":%d}`, i) {
					t.Fatalf("run %d output %s", i, done.Output)
				}
			}
			if r := res.Results[5]; r.Created || r.Error == nil || r.Error.Code != "run_exists" {
				t.Fatalf("result 5 = %+v, want run_exists", r)
			}
			if r := res.Results[6]; r.Created || r.Run == nil || r.Run.ID != existing.ID {
				t.Fatalf("result 6 = %+v, want the existing run", r)
			}
			if r := res.Results[7]; !r.Created || r.Run.Queue != "q1" {
				t.Fatalf("result 7 = %+v", r)
			}
			if n := e.runCount(); n != before+6 {
				t.Fatalf("%d runs, want %d", n, before+6)
			}
			// Bad input: nothing is started.
			before = e.runCount()
			e.do("POST", "/v1/namespaces/default/runs:batch", "producer", map[string]any{"runs": []any{}}).problem(t, 400, "invalid_argument")
			e.do("POST", "/v1/namespaces/default/runs:batch", "producer", map[string]any{"runs": []any{
				map[string]any{"workflow": "echo"}, map[string]any{"workflow": ""}}}).problem(t, 400, "invalid_argument")
			e.do("POST", "/v1/namespaces/default/runs:batch", "producer", map[string]any{"runs": []any{
				map[string]any{"workflow": "echo"}, map[string]any{"workflow": "a/b"}}}).problem(t, 400, "invalid_argument")
			tooMany := make([]any, trellis.MaxStartMany+1)
			for i := range tooMany {
				tooMany[i] = map[string]any{"workflow": "nobody-serves"}
			}
			e.do("POST", "/v1/namespaces/default/runs:batch", "producer", map[string]any{"runs": tooMany}).problem(t, 400, "invalid_argument")
			// A producer of queue q1 only may not start runs of another queue.
			e.do("POST", "/v1/namespaces/default/runs:batch", "q1-producer", map[string]any{"runs": []any{
				map[string]any{"workflow": "nobody-serves", "queue": "q1"}, map[string]any{"workflow": "nobody-serves"}}}).
				problem(t, 403, "permission_denied")
			if n := e.runCount(); n != before {
				t.Fatalf("%d runs after refused batches, want %d", n, before)
			}
			// An idempotency key replays the batch's response and starts nothing more.
			body := map[string]any{"runs": []any{map[string]any{"workflow": "nobody-serves"}}}
			first := e.do("POST", "/v1/namespaces/default/runs:batch", "producer", body, "Idempotency-Key", "batch-1").want(t, 200)
			again := e.do("POST", "/v1/namespaces/default/runs:batch", "producer", body, "Idempotency-Key", "batch-1").want(t, 200)
			if string(first.body) != string(again.body) {
				t.Fatalf("replayed %s, first %s", again.body, first.body)
			}
			if n := e.runCount(); n != before+1 {
				t.Fatalf("%d runs after a replayed batch, want %d", n, before+1)
			}
		})
	}
}

// DELETE runs/{id} deletes a finished run (admin only); an active one is a
// clear error and stays.
func TestAPIDeleteRun(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, url(t))
			done := e.start("echo", map[string]any{"n": 1}, nil)
			e.waitRun(done.ID)
			active := e.start("nobody-serves", nil, nil)
			e.do("DELETE", "/v1/namespaces/default/runs/"+done.ID, "producer", nil).problem(t, 403, "permission_denied")
			e.do("DELETE", "/v1/namespaces/default/runs/"+active.ID, "admin", nil).problem(t, 409, "run_active")
			e.do("GET", "/v1/namespaces/default/runs/"+active.ID, "reader", nil).want(t, 200)
			e.do("DELETE", "/v1/namespaces/default/runs/"+done.ID, "admin", nil).want(t, 204)
			e.do("GET", "/v1/namespaces/default/runs/"+done.ID, "reader", nil).problem(t, 404, "run_not_found")
			e.do("GET", "/v1/namespaces/default/runs/"+done.ID+"/history", "reader", nil).problem(t, 404, "run_not_found")
			e.do("DELETE", "/v1/namespaces/default/runs/"+done.ID, "admin", nil).problem(t, 404, "run_not_found")
		})
	}
}
