package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	pb "github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1"
	"github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1/workerv1connect"
	"github.com/trellis-dev/trellis/store"
	"google.golang.org/protobuf/types/known/durationpb"
)

// The attacks of issue 35 on dev mode, caps and revocation, played from outside
// against real `trellis server` and `trellis dev` processes over real HTTP.

// answer is an HTTP answer.
type answer struct {
	status int
	header http.Header
	body   string
}

// send sends a request to base+path with a body (nil: none) and headers (name,
// value, ...; "Host" sets the Host).
func send(t *testing.T, method, url string, body io.Reader, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return answer{res.StatusCode, res.Header, string(b)}
}

// problem checks an answer is a problem with status and code.
func (a answer) problem(t *testing.T, what string, status int, code string) {
	t.Helper()
	var p struct {
		Code string `json:"code"`
	}
	if a.status != status || a.header.Get("Content-Type") != "application/problem+json" ||
		json.Unmarshal([]byte(a.body), &p) != nil || p.Code != code {
		t.Errorf("%s: %d %s %s, want %d problem %s", what, a.status, a.header.Get("Content-Type"), a.body, status, code)
	}
}

// webPageAttacks plays against an insecure server at base what a web page the
// developer opens could send, and checks each is refused; run is a run the
// refused requests would cancel.
func webPageAttacks(t *testing.T, base, run string) {
	t.Helper()
	port := base[strings.LastIndexByte(base, ':'):]
	runs := base + "/v1/namespaces/default/runs"
	// DNS rebinding: attacker.example now points at 127.0.0.1; the browser
	// sends its own name as Host. Nothing is read, nothing changed.
	for _, host := range []string{"attacker.example" + port, "attacker.example"} {
		send(t, "GET", runs, nil, "Host", host).problem(t, "GET runs with Host "+host, 403, "permission_denied")
		send(t, "GET", base+"/ui/default/runs", nil, "Host", host).problem(t, "the UI with Host "+host, 403, "permission_denied")
		send(t, "POST", runs+"/"+run+"/cancel", strings.NewReader("{}"), "Host", host, "Content-Type", "application/json").
			problem(t, "cancel with Host "+host, 403, "permission_denied")
	}
	// A cross-site "simple" request: no preflight, so the browser sends it.
	send(t, "POST", runs+"/"+run+"/cancel", nil).problem(t, "cancel without a body or content type", 415, "unsupported_media_type")
	send(t, "POST", runs+"/"+run+"/cancel", strings.NewReader("x"), "Content-Type", "text/plain").
		problem(t, "cancel as text/plain", 415, "unsupported_media_type")
	send(t, "POST", runs+"/"+run+"/cancel", strings.NewReader("a=b"), "Content-Type", "application/x-www-form-urlencoded",
		"Origin", "http://attacker.example", "Sec-Fetch-Site", "cross-site").problem(t, "a cross-site form", 403, "permission_denied")
	send(t, "POST", runs+"/"+run+"/cancel", nil, "Content-Type", "application/json", "Origin", "http://attacker.example").
		problem(t, "cancel with a foreign Origin", 403, "permission_denied")
	send(t, "POST", base+"/v1/namespaces/default/queues/default/pause", nil).problem(t, "pause without a content type", 415, "unsupported_media_type")
	send(t, "POST", base+"/v1/tokens", strings.NewReader(`{"name":"evil","grants":[{"role":"admin","namespace":"*"}]}`),
		"Content-Type", "application/json").problem(t, "token creation", 403, "permission_denied")
	// Nothing changed.
	a := send(t, "GET", runs+"/"+run, nil)
	var r trellis.Run
	if a.status != 200 || json.Unmarshal([]byte(a.body), &r) != nil || r.Status.Terminal() {
		t.Fatalf("the run after the attacks: %d %s", a.status, a.body)
	}
	if a := send(t, "GET", base+"/v1/namespaces/default/queues", nil); strings.Contains(a.body, `"paused":true`) {
		t.Fatalf("a queue was paused: %s", a.body)
	}
}

// A real `trellis server --insecure` refuses what a web page could send, and
// changes nothing; the CLI, a program, still works through it.
func TestInsecureServerRefusesWebPages(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	p := startTrellisServer(t, "--store", url, "--listen", "127.0.0.1:0", "--insecure", "--no-scheduler")
	a := send(t, "POST", p.base()+"/v1/namespaces/default/runs", strings.NewReader(`{"workflow":"nobody-runs-it"}`),
		"Content-Type", "application/json")
	var run trellis.Run
	if a.status != 201 || json.Unmarshal([]byte(a.body), &run) != nil {
		t.Fatalf("start: %d %s", a.status, a.body)
	}
	webPageAttacks(t, p.base(), run.ID)
	st, err := trellis.OpenStore(ctxT(t), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if ts, err := st.TokenList(ctxT(t)); err != nil || len(ts) != 0 {
		t.Fatalf("tokens in the store: %v %v", ts, err)
	}
	// The CLI's cancel (a POST without a body) goes through.
	trellisCmd(t, "runs", "cancel", run.ID, "--server", p.base()).ok(t)
	if got, err := st.RunGet(ctxT(t), &store.RunGetParams{Namespace: "default", Ref: run.ID}); err != nil || got.Status != store.StatusCancelled {
		t.Fatalf("after the CLI's cancel: %v %v", got, err)
	}
}

// `trellis dev` serves its UI in dev mode: the same attacks are refused.
func TestDevRefusesWebPages(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	p := startTrellis(t, regexp.MustCompile(`web UI at http://(127\.0\.0\.1:\d+)/`), "dev", "--store", url, "--ui", "127.0.0.1:0")
	a := send(t, "POST", p.base()+"/v1/namespaces/default/runs", strings.NewReader(`{"workflow":"nobody-runs-it"}`),
		"Content-Type", "application/json")
	var run trellis.Run
	if a.status != 201 || json.Unmarshal([]byte(a.body), &run) != nil {
		t.Fatalf("start: %d %s", a.status, a.body)
	}
	webPageAttacks(t, p.base(), run.ID)
}

// makeTokens creates tokens in the store at url and returns their secrets by
// name.
func makeTokens(t *testing.T, url string, grants map[string][]auth.Grant) map[string]string {
	t.Helper()
	st, err := trellis.OpenStore(ctxT(t), url, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	secrets := map[string]string{}
	for name, gs := range grants {
		secret, hash, err := auth.NewToken()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.TokenCreate(ctxT(t), &store.TokenCreateParams{Name: name, Grants: gs, Hash: hash}); err != nil {
			t.Fatal(err)
		}
		secrets[name] = secret
	}
	return secrets
}

// A reader token opens streams until its cap and gets 429 with Retry-After;
// once it is revoked, its SSE streams and a worker token's Claim and
// Subscribe streams end within a second, and their next requests are refused.
func TestStreamCapAndRevocationFromOutside(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	tok := makeTokens(t, url, map[string][]auth.Grant{
		"admin":  {{Role: auth.RoleAdmin, Namespace: auth.AllNamespaces}},
		"dash":   {{Role: auth.RoleReader, Namespace: "default"}},
		"worker": {{Role: auth.RoleWorker, Namespace: "default"}},
	})
	const limit = 3
	p := startTrellisServer(t, "--store", url, "--listen", "127.0.0.1:0", "--no-scheduler", "--principal-streams", strconv.Itoa(limit))
	a := send(t, "POST", p.base()+"/v1/namespaces/default/runs", strings.NewReader(`{"workflow":"nobody-runs-it"}`),
		"Content-Type", "application/json", "Authorization", "Bearer "+tok["admin"])
	var run trellis.Run
	if a.status != 201 || json.Unmarshal([]byte(a.body), &run) != nil {
		t.Fatalf("start: %d %s", a.status, a.body)
	}
	streamURL := p.base() + "/v1/namespaces/default/runs/" + run.ID + "/stream"

	ends := make(chan string, limit+2)
	for range limit {
		req, _ := http.NewRequest("GET", streamURL, nil)
		req.Header.Set("Authorization", "Bearer "+tok["dash"])
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("stream: %v %v", err, res)
		}
		t.Cleanup(func() { res.Body.Close() })
		go func() {
			io.Copy(io.Discard, res.Body)
			ends <- "SSE"
		}()
	}
	over := send(t, "GET", streamURL, nil, "Authorization", "Bearer "+tok["dash"])
	over.problem(t, "a stream over the cap", 429, "rate_limited")
	if n, err := strconv.Atoi(over.header.Get("Retry-After")); err != nil || n < 1 {
		t.Errorf("Retry-After %q", over.header.Get("Retry-After"))
	}

	wc := workerv1connect.NewWorkerServiceClient(http.DefaultClient, p.base(), connect.WithInterceptors(bearer(tok["worker"])))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	workerErrs := make(chan error, 2)
	go func() { // Claim returns at the stream's first message (none) or its end
		s, err := wc.Claim(ctx, connect.NewRequest(&pb.ClaimRequest{Namespace: "default", Workflows: []string{"none"},
			Worker: "w", Credit: 1, LeaseDuration: durationpb.New(time.Minute), Wait: durationpb.New(time.Minute)}))
		if err == nil {
			for s.Receive() {
			}
			err = s.Err()
			s.Close()
		}
		workerErrs <- err
	}()
	sub, err := wc.Subscribe(ctx, connect.NewRequest(&pb.SubscribeRequest{Namespace: "default", Topic: store.TopicCancel}))
	if err != nil || !sub.Receive() || !sub.Msg().Subscribed {
		t.Fatalf("subscribe: %v", err)
	}
	go func() {
		for sub.Receive() {
		}
		workerErrs <- sub.Err()
		sub.Close()
	}()
	time.Sleep(200 * time.Millisecond) // the claim stream reaches the server

	t0 := time.Now()
	for _, name := range []string{"dash", "worker"} {
		trellisCmd(t, "tokens", "revoke", name, "--server", p.base(), "--token", tok["admin"]).ok(t)
	}
	for range limit {
		select {
		case <-ends:
		case <-time.After(10 * time.Second):
			t.Fatal("an SSE stream of the revoked token did not end")
		}
	}
	for range 2 {
		select {
		case err := <-workerErrs:
			var ce *connect.Error
			if !errors.As(err, &ce) || ce.Code() != connect.CodeUnauthenticated {
				t.Errorf("a worker stream ended with %v, want unauthenticated", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a worker stream of the revoked token did not end")
		}
	}
	if took := time.Since(t0); took > time.Second {
		t.Errorf("the revoked tokens' streams ended %s after the revocation, want within 1s", took)
	}
	// The next request is refused once the server's authentication cache has
	// forgotten the token (at once where the revocation forgets it).
	waitUntil(t, "the revoked token refused", 3*time.Second, func() bool {
		return send(t, "GET", streamURL, nil, "Authorization", "Bearer "+tok["dash"]).status == 401
	})
	_, err = wc.ListWorkers(context.Background(), connect.NewRequest(&pb.ListWorkersRequest{Namespace: "default"}))
	if ce := (*connect.Error)(nil); !errors.As(err, &ce) || ce.Code() != connect.CodeUnauthenticated {
		t.Errorf("the revoked worker's next call: %v, want unauthenticated", err)
	}
}

// waitUntil waits up to within for cond, checking every 50ms.
func waitUntil(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// bearer sends Authorization: Bearer token on every call of a worker client.
type bearer string

func (b bearer) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, r connect.AnyRequest) (connect.AnyResponse, error) {
		r.Header().Set("Authorization", "Bearer "+string(b))
		return next(ctx, r)
	}
}

func (b bearer) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, s connect.Spec) connect.StreamingClientConn {
		c := next(ctx, s)
		c.RequestHeader().Set("Authorization", "Bearer "+string(b))
		return c
	}
}

func (b bearer) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}
