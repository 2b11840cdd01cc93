package server

import (
	"bufio"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/trellis-dev/trellis/internal/auth"
	pb "github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1"
)

// accessLines are the access log lines of a JSON log, by request ID.
func accessLines(t *testing.T, logs string) map[string]map[string]any {
	t.Helper()
	lines := map[string]map[string]any{}
	sc := bufio.NewScanner(strings.NewReader(logs))
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("log line %q: %v", sc.Text(), err)
		}
		if m["msg"] == "request" {
			id, _ := m["request_id"].(string)
			if _, dup := lines[id]; dup {
				t.Errorf("request %s has two access log lines", id)
			}
			lines[id] = m
		}
	}
	return lines
}

// Every request gets an ID (X-Request-Id, and request_id in a problem) and an
// access log line at level Info with its method, route pattern, status,
// duration, bytes, namespace, principal, ID and source; the line never holds
// the token, the query string, the body or a path's IDs. Worker calls are
// logged by procedure.
func TestAccessLog(t *testing.T) {
	const secret = "s3cr3t-token-value"
	toks := testTokens()
	toks[secret] = &auth.Principal{Name: "writer", Grants: []auth.Grant{{Role: auth.RoleAdmin, Namespace: "default"}}}
	var logs lockedBuffer
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) {
		c.Authenticator = toks
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	})
	started := e.do("POST", "/v1/namespaces/default/runs", secret,
		map[string]any{"workflow": "await-go", "id": "secret-run-id", "input": "PAYLOAD-XYZ"}).want(t, 201)
	listed := e.do("GET", "/v1/namespaces/default/runs?workflow=QUERY-XYZ", secret, nil).want(t, 200)
	missing := e.do("GET", "/v1/namespaces/default/runs/nope", secret, nil)
	p := missing.problem(t, 404, "run_not_found")
	unauth := e.do("GET", "/v1/namespaces/default/runs", "", nil)
	unrouted := e.do("GET", "/v2/elsewhere", "", nil)
	if _, err := e.workerClient("worker").ListWorkers(t.Context(), connect.NewRequest(&pb.ListWorkersRequest{Namespace: "default"})); err != nil {
		t.Fatal(err)
	}
	// IDs: one per request, each answered, the problem's the header's.
	ids := map[string]bool{}
	for _, r := range []*resp{started, listed, missing, unauth, unrouted} {
		id := r.header.Get(RequestIDHeader)
		if len(id) != 24 || ids[id] {
			t.Fatalf("X-Request-Id %q: want 24 hex digits, unique", id)
		}
		ids[id] = true
	}
	if p.RequestID != missing.header.Get(RequestIDHeader) {
		t.Errorf("problem request_id %q, header %q", p.RequestID, missing.header.Get(RequestIDHeader))
	}
	e.srv.Shutdown(t.Context()) // every handler has returned: every line is written
	all := logs.String()
	for _, leak := range []string{secret, "Bearer", "PAYLOAD-XYZ", "QUERY-XYZ", "secret-run-id"} {
		if strings.Contains(all, leak) {
			t.Errorf("the log holds %q:\n%s", leak, all)
		}
	}
	lines := accessLines(t, all)
	want := func(r *resp, fields map[string]any) {
		t.Helper()
		l, ok := lines[r.header.Get(RequestIDHeader)]
		if !ok {
			t.Errorf("no access log line for request %s", r.header.Get(RequestIDHeader))
			return
		}
		if l["level"] != "INFO" || l["source"] != "127.0.0.1" || l["duration"] == nil {
			t.Errorf("line %v: want level INFO, source 127.0.0.1, a duration", l)
		}
		for k, v := range fields {
			if l[k] != v {
				t.Errorf("line %v: %s = %v, want %v", l, k, l[k], v)
			}
		}
		if _, ok := l["principal"]; ok != (fields["principal"] != nil) {
			t.Errorf("line %v: principal present %v", l, ok)
		}
	}
	want(started, map[string]any{"method": "POST", "route": "/v1/namespaces/{ns}/runs", "status": 201.0,
		"namespace": "default", "principal": "writer", "bytes": float64(len(started.body))})
	want(listed, map[string]any{"method": "GET", "route": "/v1/namespaces/{ns}/runs", "status": 200.0, "principal": "writer"})
	want(missing, map[string]any{"route": "/v1/namespaces/{ns}/runs/{id}", "status": 404.0, "principal": "writer",
		"bytes": float64(len(missing.body))})
	want(unauth, map[string]any{"route": "/v1/namespaces/{ns}/runs", "status": 401.0})
	want(unrouted, map[string]any{"route": "/", "status": 404.0})
	var worker map[string]any
	for _, l := range lines {
		if l["route"] == "/trellis.worker.v1.WorkerService/ListWorkers" {
			worker = l
		}
	}
	if worker == nil || worker["principal"] != "worker" || worker["status"] != 200.0 || worker["method"] != "POST" {
		t.Errorf("worker call's line: %v", worker)
	}
	if len(lines) != 6 {
		t.Errorf("%d access log lines, want 6:\n%s", len(lines), all)
	}
}

// DisableAccessLog writes no line, and requests keep their IDs.
func TestAccessLogDisabled(t *testing.T) {
	var logs lockedBuffer
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) {
		c.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
		c.DisableAccessLog = true
	})
	r := e.do("GET", "/v1/namespaces/default/runs", "reader", nil).want(t, 200)
	if r.header.Get(RequestIDHeader) == "" {
		t.Error("no X-Request-Id")
	}
	e.srv.Shutdown(t.Context())
	if l := accessLines(t, logs.String()); len(l) != 0 {
		t.Errorf("access log disabled, %d lines: %s", len(l), logs.String())
	}
}
