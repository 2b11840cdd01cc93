package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
)

// Every route has a rule: it is public, or it names a role and a scope.
func TestEveryRouteHasARule(t *testing.T) {
	for _, rt := range routeTable {
		if rt.public != (rt.role == "") || (!rt.public && (!rt.role.Valid() || rt.scope == scopeNone)) {
			t.Errorf("%s %s: no authorization rule (public %v, role %q, scope %d)", rt.method, rt.pattern, rt.public, rt.role, rt.scope)
		}
	}
}

// A route without a rule is denied to everyone, even an admin.
func TestRouteWithoutRuleIsDenied(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	ruleless := route{method: "GET", pattern: "/v1/namespaces/{ns}/ruleless",
		handle: func(*Server, http.ResponseWriter, *http.Request, *call) error { return nil }}
	w := httptest.NewRecorder()
	r := httptest.NewRequest("GET", "/v1/namespaces/default/ruleless", nil)
	r.SetPathValue("ns", "default")
	r.Header.Set("Authorization", "Bearer admin")
	e.srv.wrap(ruleless).ServeHTTP(w, r)
	if w.Code != 403 {
		t.Fatalf("ruleless route answered %d: %s", w.Code, w.Body)
	}
}

// The walk: every route with every role is allowed exactly when the route's role
// (or admin) is granted on the namespace; a grant on another namespace, no
// token or a wrong one are refused.
func TestAuthorizationWalk(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	run := e.start("needs-anyone", nil, nil)
	approval := e.pendingApproval(run.ID)
	roles := []auth.Role{auth.RoleAdmin, auth.RoleProducer, auth.RoleWorker, auth.RoleReader, auth.RoleApprover}
	for _, rt := range routeTable {
		path := strings.NewReplacer("{ns}", "default", "{key}", "k", "{name}", "nobody", "{queue}", "default").Replace(rt.pattern)
		if strings.Contains(rt.pattern, "/approvals/{id}") {
			path = strings.Replace(path, "{id}", approval, 1)
		}
		path = strings.Replace(path, "{id}", run.ID, 1)
		var body any
		switch rt.request.(type) {
		case StartRequest:
			body = map[string]any{"workflow": "echo"}
		case EventRequest:
			body = map[string]any{"name": "x"}
		case StartManyRequest:
			body = map[string]any{"runs": []any{map[string]any{"workflow": "nobody-serves"}}}
		case TokenRequest:
			body = map[string]any{"name": "walk", "grants": []map[string]any{{"role": "reader", "namespace": "default"}}}
		}
		for _, role := range roles {
			token := string(role)
			if role == auth.RoleAdmin {
				token = "admin"
			}
			var r *resp
			if rt.stream { // an allowed stream stays open: read its head only
				r = e.streamHead(path, token)
			} else {
				r = e.do(rt.method, path, token, body)
			}
			// The walk's tokens are granted on namespace default; a global route
			// needs its role on every namespace ("*"), which only admin has.
			allowed := rt.public || role == auth.RoleAdmin || (role == rt.role && rt.scope != scopeGlobal)
			denied := r.status == 403 || r.status == 401
			if allowed == denied {
				t.Errorf("%s %s as %s: %d %s (allowed by the table: %v)", rt.method, rt.pattern, role, r.status, r.body, allowed)
			}
		}
		if rt.public {
			continue
		}
		e.do(rt.method, path, "other-reader", body).problem(t, 403, "permission_denied")
		e.do(rt.method, path, "", body).problem(t, 401, "unauthenticated")
		e.do(rt.method, path, "wrong", body).problem(t, 401, "unauthenticated")
	}
}

// The OpenAPI document and the routes cannot drift: every operation of the
// served document is routed to the route it describes, and every route is in it.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	var doc struct {
		OpenAPI    string                               `json:"openapi"`
		Paths      map[string]map[string]map[string]any `json:"paths"`
		Components struct {
			Schemas map[string]any `json:"schemas"`
		} `json:"components"`
	}
	r := e.do("GET", "/v1/openapi.json", "", nil).want(t, 200)
	r.decode(t, &doc)
	if doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi %q", doc.OpenAPI)
	}
	mux := e.srv.mux
	seen := 0
	for pattern, ops := range doc.Paths {
		for method, op := range ops {
			method = strings.ToUpper(method)
			path := regexp.MustCompile(`\{[a-z]+\}`).ReplaceAllString(pattern, "x")
			_, got := mux.Handler(httptest.NewRequest(method, path, nil))
			if got != method+" "+pattern {
				t.Errorf("document has %s %s, the server routes it to %q", method, pattern, got)
			}
			if rt := findRoute(method, pattern); rt == nil || op["operationId"] != rt.op || (!rt.public && op["x-trellis-role"] != string(rt.role)) {
				t.Errorf("%s %s: document %v does not match the route table", method, pattern, op)
			}
			seen++
		}
	}
	if seen != len(routeTable) {
		t.Errorf("document has %d operations, the route table %d", seen, len(routeTable))
	}
	for _, ref := range regexp.MustCompile(`"#/components/schemas/([A-Za-z]+)"`).FindAllStringSubmatch(string(r.body), -1) {
		if doc.Components.Schemas[ref[1]] == nil {
			t.Errorf("dangling reference to schema %s", ref[1])
		}
	}
	want, _ := json.MarshalIndent(OpenAPI(), "", "  ")
	if string(want) != string(r.body) {
		t.Error("served document differs from OpenAPI()")
	}
}

func findRoute(method, pattern string) *route {
	for i := range routeTable {
		if routeTable[i].method == method && routeTable[i].pattern == pattern {
			return &routeTable[i]
		}
	}
	return nil
}

// --insecure is refused unless the server listens on loopback only; without it
// the store's tokens authenticate requests.
func TestInsecureOnlyOnLoopback(t *testing.T) {
	url := storeURLs(t)["sqlite"](t)
	for listen, ok := range map[string]bool{"127.0.0.1:0": true, "[::1]:7070": true, "localhost:7070": true,
		":7070": false, "0.0.0.0:7070": false, "10.0.0.1:7070": false, "example.com:80": false} {
		s, err := New(context.Background(), Config{Store: url, Listen: listen, Insecure: true})
		if (err == nil) != ok {
			t.Errorf("insecure on %s: err %v, want ok %v", listen, err, ok)
		}
		if s != nil {
			s.Shutdown(context.Background())
		}
	}
	// Without an Authenticator and not insecure, the store's tokens authenticate:
	// a request without a token is refused.
	s, err := New(context.Background(), Config{Store: url})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	rec := httptest.NewRecorder()
	s.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/v1/namespaces/default/runs", nil))
	if rec.Code != 401 {
		t.Errorf("no token against the store's tokens: %d, want 401", rec.Code)
	}
}

// A grant restricted to a queue reaches the runs of that queue only: their reads,
// and lists filtered by it.
func TestQueueRestrictedGrant(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	inQ1 := e.start("nobody-serves", nil, map[string]any{"queue": "q1"})
	inDefault := e.start("nobody-serves", nil, nil)
	e.do("GET", "/v1/namespaces/default/runs?queue=q1", "q1-reader", nil).want(t, 200)
	e.do("GET", "/v1/namespaces/default/runs", "q1-reader", nil).problem(t, 403, "permission_denied")
	e.do("GET", "/v1/namespaces/default/runs?queue=default", "q1-reader", nil).problem(t, 403, "permission_denied")
	e.do("GET", "/v1/namespaces/default/runs/"+inQ1.ID, "q1-reader", nil).want(t, 200)
	e.do("GET", "/v1/namespaces/default/runs/"+inDefault.ID+"/history", "q1-reader", nil).problem(t, 403, "permission_denied")
	e.do("GET", "/v1/namespaces/default/workers", "q1-reader", nil).problem(t, 403, "permission_denied")
	e.do("POST", "/v1/namespaces/default/runs", "q1-producer", map[string]any{"workflow": "w", "queue": "q1"}).want(t, 201)
	e.do("POST", "/v1/namespaces/default/runs", "q1-producer", map[string]any{"workflow": "w"}).problem(t, 403, "permission_denied")
	e.do("POST", "/v1/namespaces/default/runs/"+inQ1.ID+"/cancel", "q1-producer", nil).want(t, 200)
	e.do("POST", "/v1/namespaces/default/runs/"+inDefault.ID+"/cancel", "q1-producer", nil).problem(t, 403, "permission_denied")
}

// A start that names no queue is authorized on the queue the run will be in:
// the namespace's default queue, which need not be "default".
func TestStartAuthorizedOnTheDefaultQueue(t *testing.T) {
	toks := testTokens()
	toks["default-producer"] = &auth.Principal{Name: "dp", Grants: []auth.Grant{{Role: auth.RoleProducer, Namespace: "default", Queue: "default"}}}
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.Authenticator = toks })
	runs := "/v1/namespaces/default/runs"
	// Before the namespace names another default queue, "default" is it.
	e.do("POST", runs, "default-producer", map[string]any{"workflow": "w"}).want(t, 201)
	e.do("POST", runs, "q1-producer", map[string]any{"workflow": "w"}).problem(t, 403, "permission_denied")

	e.do("PATCH", "/v1/namespaces/default", "admin", map[string]any{"default_queue": "q1"}).want(t, 200)
	var run trellis.Run
	e.do("POST", runs, "q1-producer", map[string]any{"workflow": "w"}).want(t, 201).decode(t, &run)
	if run.Queue != "q1" {
		t.Errorf("run started by the q1 producer is in queue %q, want q1", run.Queue)
	}
	n := e.runCount()
	e.do("POST", runs, "default-producer", map[string]any{"workflow": "w"}).problem(t, 403, "permission_denied")
	e.do("POST", runs+":batch", "default-producer", map[string]any{"runs": []any{map[string]any{"workflow": "w"}}}).
		problem(t, 403, "permission_denied")
	if got := e.runCount(); got != n {
		t.Errorf("refused starts created %d runs", got-n)
	}
	var batch trellis.StartManyResponse
	e.do("POST", runs+":batch", "q1-producer", map[string]any{"runs": []any{map[string]any{"workflow": "w"}}}).
		want(t, 200).decode(t, &batch)
	if len(batch.Results) != 1 || batch.Results[0].Run == nil || batch.Results[0].Run.Queue != "q1" {
		t.Errorf("batch start by the q1 producer: %+v, want one run in q1", batch.Results)
	}
}
