package server

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis/internal/problem"
)

// From outside, against a real server: each refusal is answered with its own
// code, a detail for people (no Go call chain), and a status and code that
// the OpenAPI document declares for the operation.
func TestProblemsFromOutside(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	const runs = "/v1/namespaces/default/runs"
	const schedules = "/v1/namespaces/default/schedules"
	done := e.start("echo", map[string]any{"a": 1}, map[string]any{"id": "done"})
	e.waitRun(done.ID)
	e.start("await-go", nil, map[string]any{"id": "waiting"})
	e.do("POST", "/v1/namespaces", "admin", map[string]any{"name": "tenant"}).want(t, 201)
	e.do("POST", "/v1/namespaces/tenant/queues", "admin", map[string]any{"name": "q", "paused": true}).want(t, 201)
	spec := map[string]any{"workflow": "echo", "cron": "0 2 * * *"}
	e.do("POST", schedules, "admin", map[string]any{"name": "nightly", "spec": spec}).want(t, 201)
	e.do("POST", runs, "producer", map[string]any{"workflow": "echo"}, IdempotencyKeyHeader, "k1").want(t, 201)
	doc := OpenAPI()
	for _, c := range []struct {
		op, method, path, token string
		body                    any
		status                  int
		code                    string
		hdr                     []string
	}{
		{"getRun", "GET", runs + "/nope", "reader", nil, 404, "run_not_found", nil},
		{"getValue", "GET", runs + "/done/values/nope", "reader", nil, 404, "key_not_found", nil},
		{"getValue", "GET", runs + "/nope/values/k", "reader", nil, 404, "run_not_found", nil},
		{"getApproval", "GET", "/v1/namespaces/default/approvals/nope", "reader", nil, 404, "approval_not_found", nil},
		{"getNamespace", "GET", "/v1/namespaces/nope", "admin", nil, 404, "namespace_not_found", nil},
		{"getQueue", "GET", "/v1/namespaces/tenant/queues/nope", "admin", nil, 404, "queue_not_found", nil},
		{"getSchedule", "GET", schedules + "/nope", "reader", nil, 404, "schedule_not_found", nil},
		{"startRun", "POST", runs, "producer", map[string]any{"workflow": "echo", "id": "done", "reuse": "reject"}, 409, "run_exists", nil},
		{"cancelRun", "POST", runs + "/done/cancel", "producer", nil, 409, "run_finished", nil},
		{"resumeRun", "POST", runs + "/waiting/resume", "producer", nil, 409, "run_not_blocked", nil},
		{"deleteRun", "DELETE", runs + "/waiting", "admin", nil, 409, "run_active", nil},
		{"createNamespace", "POST", "/v1/namespaces", "admin", map[string]any{"name": "tenant"}, 409, "namespace_exists", nil},
		{"createQueue", "POST", "/v1/namespaces/tenant/queues", "admin", map[string]any{"name": "q"}, 409, "queue_exists", nil},
		{"pauseQueue", "POST", "/v1/namespaces/tenant/queues/q/pause", "admin", nil, 409, "queue_state", nil},
		{"createSchedule", "POST", schedules, "admin", map[string]any{"name": "nightly", "spec": spec}, 409, "schedule_exists", nil},
		{"resumeSchedule", "POST", schedules + "/nightly/resume", "admin", nil, 409, "schedule_not_paused", nil},
		{"startRun", "POST", runs, "producer", `{"workflow":`, 400, "invalid_argument", nil},
		{"startRun", "POST", runs, "producer", `{"workflow":"echo"}`, 415, "unsupported_media_type", []string{"Content-Type", "text/plain"}},
		{"startRun", "POST", runs, "producer", map[string]any{"workflow": "echo", "input": strings.Repeat("x", 70<<10)}, 413, "payload_too_large", nil},
		{"startRun", "POST", runs, "producer", map[string]any{"workflow": "other"}, 422, "idempotency_key_conflict", []string{IdempotencyKeyHeader, "k1"}},
		{"listRuns", "GET", runs, "", nil, 401, "unauthenticated", nil},
		{"startRun", "POST", runs, "reader", map[string]any{"workflow": "echo"}, 403, "permission_denied", nil},
	} {
		p := e.do(c.method, c.path, c.token, c.body, c.hdr...).problem(t, c.status, c.code)
		if strings.Contains(p.Detail, "trellis:") || strings.Contains(p.Detail, "store:") || strings.HasPrefix(p.Detail, "starting") {
			t.Errorf("%s %s: detail %q is a call chain", c.method, c.path, p.Detail)
		}
		want, _ := problem.Of(c.code)
		if p.Title != want.Title {
			t.Errorf("%s %s: title %q, want %q", c.method, c.path, p.Title, want.Title)
		}
		if !declared(doc, c.op, c.status, c.code) {
			t.Errorf("%s answered %d %s, which the OpenAPI document does not declare for it", c.op, c.status, c.code)
		}
	}
	if n := e.runCount(); n != 3 {
		t.Errorf("%d runs after the refusals, want 3", n)
	}
}

// declared reports whether the document declares that op answers code with status.
func declared(doc obj, op string, status int, code string) bool {
	for _, item := range doc["paths"].(obj) {
		for _, o := range item.(obj) {
			if o.(obj)["operationId"] != op {
				continue
			}
			r, _ := o.(obj)["responses"].(obj)[strconv.Itoa(status)].(obj)
			codes, _ := r["x-trellis-codes"].([]string)
			for _, c := range codes {
				if c == code {
					return true
				}
			}
		}
	}
	return false
}

// A 405 names the methods the path takes (RFC 9110: Allow), and a path no
// route has is route_not_found, with the path in its detail.
func TestMethodNotAllowedAllow(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	for _, c := range []struct{ method, path, allow string }{
		{"DELETE", "/v1/namespaces/default/runs", "GET, HEAD, POST"},
		{"PUT", "/v1/namespaces/default/runs/x", "GET, HEAD, DELETE"},
		{"GET", "/v1/namespaces/default/runs/x/cancel", "POST"},
		{"POST", "/v1/namespaces/default/schedules/s", "GET, HEAD, PUT, DELETE"},
		{"DELETE", "/healthz", "GET, HEAD"},
	} {
		r := e.do(c.method, c.path, "admin", nil)
		p := r.problem(t, 405, "method_not_allowed")
		if got := r.header.Get("Allow"); got != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, got, c.allow)
		}
		if !strings.Contains(p.Detail, c.allow) || !strings.Contains(p.Detail, c.method) {
			t.Errorf("%s %s: detail %q", c.method, c.path, p.Detail)
		}
	}
	r := e.do("GET", "/v1/nothing/here", "admin", nil)
	if p := r.problem(t, 404, "route_not_found"); !strings.Contains(p.Detail, "/v1/nothing/here") || r.header.Get("Allow") != "" {
		t.Errorf("unknown path: detail %q, Allow %q", p.Detail, r.header.Get("Allow"))
	}
}

// A start refused because its workflow ID is taken names the run that holds
// it, or says only that the workflow ID is taken: never the run ID generated
// for the refused start, a run that never existed. On both SQL drivers, for a
// start and for an item of a batch.
func TestRunExistsDetail(t *testing.T) {
	uuid := regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, url(t))
			holder := e.start("await-go", nil, map[string]any{"id": "taken"})
			check := func(what, detail string) {
				t.Helper()
				if !strings.Contains(detail, `"taken"`) {
					t.Errorf("%s: detail %q does not name the workflow ID", what, detail)
				}
				for _, id := range uuid.FindAllString(detail, -1) {
					if id != holder.ID {
						t.Errorf("%s: detail %q names run %s, which is not the holder %s", what, detail, id, holder.ID)
					}
				}
			}
			for _, reuse := range []string{"", "reject"} {
				p := e.do("POST", "/v1/namespaces/default/runs", "producer",
					map[string]any{"workflow": "await-go", "id": "taken", "reuse": reuse}).problem(t, 409, "run_exists")
				check("start, reuse "+reuse, p.Detail)
			}
			var res struct {
				Results []struct {
					Error *struct{ Code, Message string }
				}
			}
			e.do("POST", "/v1/namespaces/default/runs:batch", "producer", map[string]any{"runs": []any{
				map[string]any{"workflow": "await-go", "id": "taken"}, map[string]any{"workflow": "await-go", "id": "fresh"},
			}}).want(t, 200).decode(t, &res)
			if len(res.Results) != 2 || res.Results[0].Error == nil || res.Results[0].Error.Code != "run_exists" || res.Results[1].Error != nil {
				t.Fatalf("batch results %+v", res.Results)
			}
			check("batch item", res.Results[0].Error.Message)
		})
	}
}
