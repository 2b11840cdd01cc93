package server

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// Each malformed or unauthorized request gets its problem+json error and changes
// nothing.
func TestBadInputIsRefusedAndChangesNothing(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testBadInput(t, newEnv(t, url(t)))
		})
	}
}

func testBadInput(t *testing.T, e *env) {
	e.start("await-go", nil, map[string]any{"id": "target"})
	before := e.runCount()
	runs := "/v1/namespaces/default/runs"
	big := `{"workflow":"echo","input":"` + strings.Repeat("x", 70<<10) + `"}`
	for _, c := range []struct {
		name, method, path, token string
		body                      any
		hdr                       []string
		status                    int
		code                      string
	}{
		{"malformed JSON", "POST", runs, "producer", `{"workflow":`, nil, 400, "invalid_argument"},
		{"not an object", "POST", runs, "producer", `[1,2]`, nil, 400, "invalid_argument"},
		{"trailing data", "POST", runs, "producer", `{"workflow":"echo"} {}`, nil, 400, "invalid_argument"},
		{"unknown field", "POST", runs, "producer", `{"workflow":"echo","wokflow_id":"x"}`, nil, 400, "invalid_argument"},
		{"no workflow", "POST", runs, "producer", `{"input":1}`, nil, 400, "invalid_argument"},
		{"bad reuse", "POST", runs, "producer", `{"workflow":"echo","reuse":"sometimes"}`, nil, 400, "invalid_argument"},
		{"ID with a slash", "POST", runs, "producer", `{"workflow":"echo","id":"a/b"}`, nil, 400, "invalid_argument"},
		{"ID with a control character", "POST", runs, "producer", `{"workflow":"echo","id":"a\u0000b"}`, nil, 400, "invalid_argument"},
		{"bad time", "POST", runs, "producer", `{"workflow":"echo","deadline":"tomorrow"}`, nil, 400, "invalid_argument"},
		{"wrong content type", "POST", runs, "producer", `{"workflow":"echo"}`, []string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{"body over the limit", "POST", runs, "producer", big, nil, 413, "payload_too_large"},
		{"body over the limit, chunked", "POST", runs, "producer", strings.NewReader(big), nil, 413, "payload_too_large"},
		{"no token", "POST", runs, "", `{"workflow":"echo"}`, nil, 401, "unauthenticated"},
		{"wrong token", "POST", runs, "nope", `{"workflow":"echo"}`, nil, 401, "unauthenticated"},
		{"under-privileged token", "POST", runs, "reader", `{"workflow":"echo"}`, nil, 403, "permission_denied"},
		{"queue outside the grant", "POST", runs, "q1-producer", `{"workflow":"echo","queue":"q2"}`, nil, 403, "permission_denied"},
		{"other namespace", "GET", runs, "other-reader", nil, nil, 403, "permission_denied"},
		{"system namespace", "GET", "/v1/namespaces/__system__/runs", "admin", nil, nil, 403, "permission_denied"},
		{"malformed namespace", "GET", "/v1/namespaces/a%20b/runs", "admin", nil, nil, 400, "invalid_argument"},
		{"invalid page token", "GET", runs + "?page_token=zzz", "reader", nil, nil, 400, "invalid_argument"},
		{"huge limit", "GET", runs + "?limit=1000000", "reader", nil, nil, 400, "invalid_argument"},
		{"negative limit", "GET", runs + "?limit=-1", "reader", nil, nil, 400, "invalid_argument"},
		{"unknown status", "GET", runs + "?status=done", "reader", nil, nil, 400, "invalid_argument"},
		{"unknown query parameter", "GET", runs + "?statuses=done", "reader", nil, nil, 400, "invalid_argument"},
		{"repeated query parameter", "GET", runs + "?limit=1&limit=2", "reader", nil, nil, 400, "invalid_argument"},
		{"bad created_after", "GET", runs + "?created_after=yesterday", "reader", nil, nil, 400, "invalid_argument"},
		{"bad wait", "GET", runs + "/target/result?wait=forever", "reader", nil, nil, 400, "invalid_argument"},
		{"wait over the cap", "GET", runs + "/target/result?wait=1h", "reader", nil, nil, 400, "invalid_argument"},
		{"ID with an encoded slash", "GET", runs + "/a%2Fb", "reader", nil, nil, 400, "invalid_argument"},
		{"ID with an encoded slash, cancel", "POST", runs + "/target%2F..%2Fx/cancel", "producer", nil, nil, 400, "invalid_argument"},
		{"unknown run", "POST", runs + "/nope/cancel", "producer", nil, nil, 404, "run_not_found"},
		{"event without a name", "POST", runs + "/target/events", "producer", `{"payload":1}`, nil, 400, "invalid_argument"},
		{"event with unknown field", "POST", runs + "/target/events", "producer", `{"name":"go","data":1}`, nil, 400, "invalid_argument"},
		{"cancel with a body", "POST", runs + "/target/cancel", "producer", `{"force":true}`, nil, 400, "invalid_argument"},
		{"unknown path", "GET", "/v1/nothing", "admin", nil, nil, 404, "route_not_found"},
		{"wrong method", "DELETE", runs, "admin", nil, nil, 405, "method_not_allowed"},
		{"unknown approval", "POST", "/v1/namespaces/default/approvals/nope/approve", "approver", nil, nil, 404, "approval_not_found"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.do(c.method, c.path, c.token, c.body, c.hdr...)
			r.problem(t, c.status, c.code)
			if c.status == http.StatusUnauthorized && r.header.Get("WWW-Authenticate") == "" {
				t.Fatal("401 without WWW-Authenticate")
			}
		})
	}
	// A route addressing an unknown run or approval says it is absent, not
	// which read of the server's found so (scopeErr).
	for _, c := range []struct{ method, path, token, code, detail string }{
		{"POST", runs + "/nope/cancel", "producer", "run_not_found", `run not found: "nope" in namespace "default"`},
		{"POST", "/v1/namespaces/default/approvals/nope/approve", "approver", "approval_not_found", `approval not found: "nope" in namespace "default"`},
		{"GET", "/v1/namespaces/default/approvals/nope", "reader", "approval_not_found", `approval not found: "nope" in namespace "default"`},
	} {
		if p := e.do(c.method, c.path, c.token, nil).problem(t, 404, c.code); p.Detail != c.detail {
			t.Errorf("%s: detail %q, want %q", c.path, p.Detail, c.detail)
		}
	}
	if n := e.runCount(); n != before {
		t.Fatalf("%d runs after refused requests, want %d", n, before)
	}
	var got struct{ Status string }
	e.do("GET", runs+"/target", "reader", nil).want(t, 200).decode(t, &got)
	if got.Status != "pending" && got.Status != "waiting" && got.Status != "running" {
		t.Fatalf("target run is %s", got.Status)
	}
}

// A client that sends its headers too slowly is disconnected after
// ReadHeaderTimeout.
func TestSlowHeadersAreCutOff(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.ReadHeaderTimeout = 100 * time.Millisecond })
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n")); err != nil { // never finished
		t.Fatal(err)
	}
	conn.SetReadDeadline(time.Now().Add(10 * time.Second)) // a bound for a broken server, not a measurement
	b, err := io.ReadAll(conn)
	if err != nil {
		t.Fatalf("the server kept the connection: %v (read %q)", err, b)
	}
	if strings.Contains(string(b), "200 OK") {
		t.Fatalf("answered an unfinished request: %q", b)
	}
}

// Reset, resume and cancel as the SDK: reset of a finished run starts a new one,
// of an active one is refused; resume of a run that is not blocked is refused.
func TestResetResumeCancel(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	done := e.waitRun(e.start("echo", map[string]any{"n": 2}, map[string]any{"id": "again"}).ID)
	var fresh trellis.Run
	e.do("POST", "/v1/namespaces/default/runs/"+done.ID+"/reset", "producer", map[string]any{}).want(t, 201).decode(t, &fresh)
	if fresh.ID == done.ID || fresh.WorkflowID != "again" {
		t.Fatalf("reset gave %+v", fresh)
	}
	if again := e.waitRun(fresh.ID); string(again.Output) != `{"n":2}` {
		t.Fatalf("reset run output %s", again.Output)
	}
	e.do("POST", "/v1/namespaces/default/runs/"+done.ID+"/reset", "producer", `{"step":"nope"}`).problem(t, 400, "invalid_argument")
	waiting := e.start("await-go", nil, nil)
	e.do("POST", "/v1/namespaces/default/runs/"+waiting.ID+"/reset", "producer", nil).problem(t, 409, "run_active")
	e.do("POST", "/v1/namespaces/default/runs/"+waiting.ID+"/resume", "producer", nil).problem(t, 409, "run_not_blocked")
	var cancelled trellis.Run
	e.do("POST", "/v1/namespaces/default/runs/"+waiting.ID+"/cancel", "producer", `{}`).want(t, 200).decode(t, &cancelled)
	if !cancelled.CancelRequested && cancelled.Status != trellis.StatusCancelled {
		t.Fatalf("cancel gave %+v", cancelled)
	}
	if end := e.waitRun(waiting.ID); end.Status != trellis.StatusCancelled {
		t.Fatalf("cancelled run ended %s", end.Status)
	}
}
