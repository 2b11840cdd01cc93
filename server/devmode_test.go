package server

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	pb "github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1"
	"github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1/workerv1connect"
	"github.com/trellis-dev/trellis/store"
)

func TestLoopbackHost(t *testing.T) {
	t.Parallel()
	for host, want := range map[string]bool{
		"127.0.0.1:7070": true, "127.0.0.1": true, "127.9.9.9:80": true,
		"localhost:7070": true, "LocalHost": true, "localhost": true,
		"[::1]:7070": true, "[::1]": true, "[::ffff:127.0.0.1]:7070": true,
		"attacker.example:7070": false, "attacker.example": false, "": false,
		"localhost.attacker.example:7070": false, "127.0.0.1.nip.io:7070": false,
		"10.0.0.1:7070": false, "[::2]:7070": false, "0.0.0.0:7070": false,
		"[fe80::1%25lo]:7070": false, "::1": true,
	} {
		if got := loopbackHost(host); got != want {
			t.Errorf("loopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}

// devEnv is an insecure server (dev mode) on SQLite with a run waiting for an
// event, which the refused requests below would cancel.
func devEnv(t *testing.T) (*env, *trellis.Run) {
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.Insecure, c.Authenticator = true, nil })
	var run trellis.Run
	e.do("POST", "/v1/namespaces/default/runs", "", map[string]any{"workflow": "await-go"}).want(t, 201).decode(t, &run)
	return e, &run
}

// An --insecure server answers only requests to a loopback name: a page of
// attacker.example whose name was pointed at 127.0.0.1 (DNS rebinding) reads
// and changes nothing.
func TestDevModeRefusesForeignHost(t *testing.T) {
	t.Parallel()
	e, run := devEnv(t)
	port := e.base[strings.LastIndexByte(e.base, ':'):]
	for _, host := range []string{"attacker.example" + port, "attacker.example", "localhost.attacker.example" + port} {
		p := e.do("GET", "/v1/namespaces/default/runs", "", nil, "Host", host).problem(t, 403, "permission_denied")
		if !strings.Contains(p.Detail, "DNS rebinding") {
			t.Errorf("detail %q does not say why", p.Detail)
		}
		e.do("POST", "/v1/namespaces/default/runs/"+run.ID+"/cancel", "", "", "Host", host,
			"Content-Type", "application/json").problem(t, 403, "permission_denied")
		e.do("GET", "/ui/default/runs", "", nil, "Host", host).problem(t, 403, "permission_denied")
		e.do("GET", "/healthz", "", nil, "Host", host).problem(t, 403, "permission_denied")
	}
	for _, host := range []string{"localhost" + port, "127.0.0.1" + port} {
		e.do("GET", "/v1/namespaces/default/runs/"+run.ID, "", nil, "Host", host).want(t, 200)
	}
	if got := e.getRun(run.ID); got.Status.Terminal() {
		t.Fatalf("run %s after the refused requests", got.Status)
	}
}

// getRun reads a run from the store.
func (e *env) getRun(id string) *trellis.Run {
	e.t.Helper()
	var run trellis.Run
	e.do("GET", "/v1/namespaces/default/runs/"+id, "admin", nil).want(e.t, 200).decode(e.t, &run)
	return &run
}

// A state-changing request that a web page could send is refused by an
// --insecure server, and changes nothing: cross-site (Origin, Sec-Fetch-Site),
// or with a content type a page sends without a preflight (none, text/plain,
// a form). The same request from a program (JSON, no Origin) or from a page of
// the server itself is served.
func TestDevModeRefusesCrossSiteChanges(t *testing.T) {
	t.Parallel()
	e, run := devEnv(t)
	cancel := "/v1/namespaces/default/runs/" + run.ID + "/cancel"
	json := []string{"Content-Type", "application/json"}
	for _, c := range []struct {
		hdr    []string
		status int
		code   string
	}{
		{nil, 415, "unsupported_media_type"},
		{[]string{"Content-Type", "text/plain"}, 415, "unsupported_media_type"},
		{[]string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
		{[]string{"Content-Type", "multipart/form-data; boundary=x"}, 415, "unsupported_media_type"},
		{append([]string{"Origin", "http://attacker.example"}, json...), 403, "permission_denied"},
		{append([]string{"Origin", "null"}, json...), 403, "permission_denied"},
		{append([]string{"Origin", "https://" + strings.TrimPrefix(e.base, "http://")}, json...), 403, "permission_denied"},
		{append([]string{"Sec-Fetch-Site", "cross-site"}, json...), 403, "permission_denied"},
		{append([]string{"Sec-Fetch-Site", "same-site"}, json...), 403, "permission_denied"},
	} {
		r := e.do("POST", cancel, "", nil, c.hdr...)
		if r.status != c.status {
			t.Errorf("POST cancel with %q: %d %s, want %d", c.hdr, r.status, r.body, c.status)
			continue
		}
		r.problem(t, c.status, c.code)
	}
	for _, c := range []struct {
		hdr    []string
		status int
	}{
		{nil, 415},
		{[]string{"Content-Type", "text/plain"}, 415},
		{append([]string{"Origin", "http://attacker.example"}, json...), 403},
	} {
		e.do("DELETE", "/v1/namespaces/default/runs/"+run.ID, "", nil, c.hdr...).want(t, c.status)
		e.do("POST", "/v1/namespaces/default/queues/default/pause", "", nil, c.hdr...).want(t, c.status)
	}
	if got := e.getRun(run.ID); got.Status.Terminal() {
		t.Fatalf("run %s after the refused requests", got.Status)
	}
	var q struct {
		Paused bool `json:"paused"`
	}
	if r := e.do("GET", "/v1/namespaces/default/queues/default", "", nil); r.status == 200 {
		r.decode(t, &q)
	}
	if q.Paused {
		t.Fatal("the queue was paused by a refused request")
	}
	// A program's request, and a page of the server's own, are served.
	e.do("POST", cancel, "", nil, append([]string{"Origin", e.base, "Sec-Fetch-Site", "same-origin"}, json...)...).want(t, 200)
	if got := e.waitRun(run.ID); got.Status != trellis.StatusCancelled {
		t.Fatalf("run %s, want cancelled", got.Status)
	}
}

// Tokens cannot be made on an --insecure server: it would hand out a secret
// that keeps its grants once the store is served securely.
func TestDevModeMakesNoTokens(t *testing.T) {
	t.Parallel()
	e, _ := devEnv(t)
	p := e.do("POST", "/v1/tokens", "", map[string]any{"name": "evil", "grants": []map[string]string{{"role": "admin", "namespace": "*"}}}).
		problem(t, 403, "permission_denied")
	if !strings.Contains(p.Detail, "--insecure") {
		t.Errorf("detail %q does not say why", p.Detail)
	}
	if ts, err := e.st.TokenList(context.Background()); err != nil || len(ts) != 0 {
		t.Fatalf("tokens after the refusal: %v, %v", ts, err)
	}
	// Nor a new secret of a token made on the store.
	_, hash, _ := auth.NewToken()
	if _, err := e.st.TokenCreate(context.Background(), &store.TokenCreateParams{Name: "ci", Hash: hash,
		Grants: []auth.Grant{{Role: auth.RoleReader, Namespace: "default"}}}); err != nil {
		t.Fatal(err)
	}
	e.do("POST", "/v1/tokens/ci/rotate", "", map[string]any{"grace": "0s"}).problem(t, 403, "permission_denied")
	if ts, err := e.st.TokenList(context.Background()); err != nil || len(ts) != 1 || ts[0].RotatedAt != nil {
		t.Fatalf("token after the refused rotation: %+v, %v", ts, err)
	}
}

// The worker protocol on an --insecure server takes its own content types (a
// Connect client works) and refuses those a page could send.
func TestDevModeWorkerProtocol(t *testing.T) {
	t.Parallel()
	e, _ := devEnv(t)
	path := "/" + workerv1connect.WorkerServiceName + "/ResumeBlocked"
	for _, ct := range []string{"", "text/plain", "application/x-www-form-urlencoded"} {
		e.do("POST", path, "", `{"namespace":"default"}`, "Content-Type", ct).problem(t, 415, "unsupported_media_type")
	}
	e.do("POST", path, "", `{"namespace":"default"}`, "Content-Type", "application/json",
		"Origin", "http://attacker.example").problem(t, 403, "permission_denied")
	for _, opts := range [][]connect.ClientOption{nil, {connect.WithProtoJSON()}, {connect.WithGRPC()}} {
		c := workerv1connect.NewWorkerServiceClient(h2cClient(), e.base, opts...)
		if _, err := c.ResumeBlocked(context.Background(), connect.NewRequest(&pb.ResumeBlockedRequest{Namespace: "default"})); err != nil {
			t.Fatalf("ResumeBlocked with %v: %v", opts, err)
		}
	}
}

// h2cClient speaks HTTP/2 without TLS, as gRPC clients do.
func h2cClient() *http.Client {
	tr := &http.Transport{Protocols: new(http.Protocols)}
	tr.Protocols.SetUnencryptedHTTP2(true)
	return &http.Client{Transport: tr}
}
