package server

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
	"go.uber.org/goleak"
)

// tokens is a fixed-token Authenticator: a test fixture standing for the token
// store (which it does not imitate: it only maps secrets to principals).
type tokens map[string]*auth.Principal

func (m tokens) Authenticate(_ context.Context, token string) (*auth.Principal, error) {
	if p, ok := m[token]; ok {
		return p, nil
	}
	return nil, fmt.Errorf("token: %w", auth.ErrUnauthenticated)
}

// testTokens: "admin" (admin everywhere), one token per role on namespace
// "default" named after the role, "alice" (approver), "q1-producer" (producer on
// queue q1 only) and "other-reader" (reader of namespace "other"), "global-reader" (reader of every namespace).
func testTokens() tokens {
	m := tokens{"admin": {Name: "root", Grants: []auth.Grant{{Role: auth.RoleAdmin, Namespace: "*"}}}}
	for _, r := range []auth.Role{auth.RoleProducer, auth.RoleWorker, auth.RoleReader, auth.RoleApprover} {
		m[string(r)] = &auth.Principal{Name: string(r), Grants: []auth.Grant{{Role: r, Namespace: "default"}}}
	}
	m["alice"] = &auth.Principal{Name: "alice", Grants: []auth.Grant{{Role: auth.RoleApprover, Namespace: "default"}}}
	m["q1-producer"] = &auth.Principal{Name: "q1", Grants: []auth.Grant{{Role: auth.RoleProducer, Namespace: "default", Queue: "q1"}}}
	m["q1-reader"] = &auth.Principal{Name: "q1r", Grants: []auth.Grant{{Role: auth.RoleReader, Namespace: "default", Queue: "q1"}}}
	m["other-reader"] = &auth.Principal{Name: "other", Grants: []auth.Grant{{Role: auth.RoleReader, Namespace: "other"}}}
	m["global-reader"] = &auth.Principal{Name: "global", Grants: []auth.Grant{{Role: auth.RoleReader, Namespace: "*"}}}
	return m
}

// Workflows the test worker runs (the server runs none).
var (
	echoWF = trellis.NewWorkflow("echo", func(wc *trellis.Context, in map[string]any) (map[string]any, error) {
		if err := wc.Set("seen", in); err != nil {
			return nil, err
		}
		return in, nil
	})
	eventWF = trellis.NewWorkflow("await-go", func(wc *trellis.Context, _ any) (string, error) {
		return trellis.WaitEvent[string](wc, "go", 0)
	})
	approvalWF = trellis.NewWorkflow("needs-alice", func(wc *trellis.Context, _ any) (bool, error) {
		d, err := trellis.Approval(wc, "ship", trellis.ApprovalOptions{Approvers: []string{"alice"}, Subject: "ship it"})
		return d.Approved, err
	})
	openApprovalWF = trellis.NewWorkflow("needs-anyone", func(wc *trellis.Context, _ any) (string, error) {
		d, err := trellis.Approval(wc, "ok", trellis.ApprovalOptions{})
		return d.Principal, err
	})
)

// env is a listening server on a fresh store, with a worker in the test process.
type env struct {
	t      *testing.T
	base   string
	srv    *Server
	st     store.Store
	worker *trellis.Client
	// keyAll: do sends a fresh Idempotency-Key with every mutating request
	// that names none (for a server with RequireIdempotencyKey).
	keyAll bool
}

// storeURLs names the stores the API tests run on.
func storeURLs(t *testing.T) map[string]func(t *testing.T) string {
	return map[string]func(t *testing.T) string{
		// A fuzz input's test name, and so its TempDir, holds '#'.
		"sqlite":   func(t *testing.T) string { return storesqlite.URL(filepath.Join(t.TempDir(), "trellis.db")) },
		"postgres": func(t *testing.T) string { return pgtest.SchemaURL(t) },
	}
}

func newEnv(t *testing.T, url string, mod ...func(*Config)) *env {
	t.Helper()
	st, err := trellis.OpenStore(context.Background(), url, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Backend: st, Listen: "127.0.0.1:0", Authenticator: testTokens(), MaxBodyBytes: 64 << 10, MaxWait: 10 * time.Second}
	for _, m := range mod {
		m(&cfg)
	}
	srv, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	w, err := trellis.Open(context.Background(), trellis.Config{Backend: st,
		Worker: trellis.WorkerOptions{PollInterval: 50 * time.Millisecond, ShutdownGrace: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(context.Background(), echoWF, eventWF, approvalWF, openApprovalWF); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		w.Close()
		st.Close()
	})
	return &env{t: t, base: "http://" + srv.Addr().String(), srv: srv, st: st, worker: w}
}

// resp is an answer: status, headers and body.
type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r *resp) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decoding %s: %v", r.body, err)
	}
}

// problem decodes a problem answer and checks its status and code.
func (r *resp) problem(t *testing.T, status int, code string) Problem {
	t.Helper()
	var p Problem
	if r.status != status || r.header.Get("Content-Type") != "application/problem+json" {
		t.Fatalf("got %d %s %s, want %d problem %s", r.status, r.header.Get("Content-Type"), r.body, status, code)
	}
	r.decode(t, &p)
	if p.Code != code || p.Status != status || p.Title == "" || p.Detail == "" || !strings.HasSuffix(p.Type, "#"+code) {
		t.Fatalf("problem %+v, want status %d code %s", p, status, code)
	}
	return p
}

// do sends a request with token (none when ""); body is sent as JSON unless it is
// a string or []byte, sent as is. hdr are headers, name then value: "Host" sets
// the request's Host, an empty Content-Type sends none.
func (e *env) do(method, path, token string, body any, hdr ...string) *resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	case io.Reader: // length unknown: sent chunked
		rd = io.MultiReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.base+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		switch {
		case hdr[i] == "Host":
			req.Host = hdr[i+1]
		case hdr[i] == "Content-Type" && hdr[i+1] == "":
			req.Header.Del(hdr[i]) // none
		default:
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	if e.keyAll && method != http.MethodGet && req.Header.Get(IdempotencyKeyHeader) == "" {
		req.Header.Set(IdempotencyKeyHeader, fmt.Sprintf("auto-%d", time.Now().UnixNano()))
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return &resp{status: res.StatusCode, header: res.Header, body: b}
}

// want checks r's status.
func (r *resp) want(t *testing.T, status int) *resp {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	return r
}

// start starts a run of workflow with input through the API.
func (e *env) start(workflow string, input any, extra map[string]any) *trellis.Run {
	e.t.Helper()
	body := map[string]any{"workflow": workflow, "input": input}
	for k, v := range extra {
		body[k] = v
	}
	var run trellis.Run
	e.do("POST", "/v1/namespaces/default/runs", "producer", body).want(e.t, 201).decode(e.t, &run)
	return &run
}

// waitRun waits for the run to end through result?wait.
func (e *env) waitRun(id string) *trellis.Run {
	e.t.Helper()
	for range 10 {
		r := e.do("GET", "/v1/namespaces/default/runs/"+id+"/result?wait=5s", "reader", nil)
		var run trellis.Run
		r.decode(e.t, &run)
		if r.status == 200 {
			return &run
		}
		r.want(e.t, 202)
	}
	e.t.Fatalf("run %s did not end", id)
	return nil
}

// runCount is the number of runs in namespace default, to check that refused
// requests change nothing.
func (e *env) runCount() int {
	e.t.Helper()
	res, err := e.st.RunList(context.Background(), &store.RunListParams{Namespace: "default", Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	return len(res.Runs)
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// until waits until cond holds, woken by changes of run id (and a fallback tick).
func (e *env) until(id string, cond func() bool) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	changed, unsub, err := e.st.Subscribe(ctx, store.RunTopic("default", id))
	if err != nil {
		e.t.Fatal(err)
	}
	defer unsub()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-changed:
		case <-tick.C:
		case <-ctx.Done():
			e.t.Fatalf("run %s: condition not met in time", id)
		}
	}
}

// startServer starts a server of cfg and, at cleanup, shuts it down and closes
// its store (cfg.Backend).
func startServer(t *testing.T, cfg Config) *Server {
	t.Helper()
	srv, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
		cfg.Backend.Close()
	})
	return srv
}
