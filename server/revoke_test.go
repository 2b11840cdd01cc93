package server

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/internal/auth/storeauth"
	pb "github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1"
	"github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1/workerv1connect"
	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/store"
	"google.golang.org/protobuf/types/known/durationpb"
)

// revocationBound is how soon a revoked token's streams must end on every
// server (issue 35): the Authenticator's cache (500 ms) and an interval of
// the registry's checks (250 ms), with room.
const revocationBound = time.Second

// authTTL is the Authenticator's cache time the servers of these tests use.
const authTTL = 500 * time.Millisecond

// storeServer is a listening server on its own connection to the store at
// url, authenticating the store's tokens.
func storeServer(t *testing.T, url string, mod ...func(*Config)) (*Server, string) {
	t.Helper()
	st, err := trellis.OpenStore(context.Background(), url, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Backend: st, Listen: "127.0.0.1:0", Authenticator: storeauth.New(st, storeauth.Config{CacheTTL: authTTL}),
		StreamProbeInterval: 50 * time.Millisecond, Scheduler: SchedulerConfig{Disabled: true}}
	for _, m := range mod {
		m(&cfg)
	}
	srv := startServer(t, cfg)
	return srv, "http://" + srv.Addr().String()
}

// tokenSecret creates a token in the store and returns its secret.
func tokenSecret(t *testing.T, st store.Store, name string, grants ...auth.Grant) string {
	t.Helper()
	secret, hash, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.TokenCreate(context.Background(), &store.TokenCreateParams{Name: name, Grants: grants, Hash: hash}); err != nil {
		t.Fatal(err)
	}
	return secret
}

// openedStreams are a principal's open streams: an SSE run stream, a Claim
// stream waiting for runs and a Subscribe stream, each read to its end on a
// goroutine of its own, which reports the end on ends.
type openedStreams struct {
	ends chan streamEnd
}

type streamEnd struct {
	what string
	err  error
	at   time.Time
}

// openAll opens the three kinds of stream on the server at base with secret,
// on run runID.
func openAll(t *testing.T, base, secret, runID string) *openedStreams {
	t.Helper()
	e := &env{t: t, base: base}
	o := &openedStreams{ends: make(chan streamEnd, 3)}
	sse := e.openStream(runID, "", secret)
	c := workerv1connect.NewWorkerServiceClient(http.DefaultClient, base, connect.WithInterceptors(withToken(secret)))
	// A stream's Close reads it to its end: cancelled first, so that a test
	// that failed does not wait for the claim's minute.
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() {
		for {
			if _, ok := sse.next(t); !ok {
				break
			}
		}
		o.ends <- streamEnd{"SSE", nil, time.Now()}
	}()
	go func() { // Claim returns at the stream's first message (none here) or its end
		claim, err := c.Claim(ctx, connect.NewRequest(&pb.ClaimRequest{Namespace: "default", Workflows: []string{"nothing"},
			Worker: "w", Credit: 1, LeaseDuration: durationpb.New(time.Minute), Wait: durationpb.New(time.Minute)}))
		if err == nil {
			for claim.Receive() {
			}
			err = claim.Err()
			claim.Close()
		}
		o.ends <- streamEnd{"Claim", err, time.Now()}
	}()
	go func() {
		sub, err := c.Subscribe(ctx, connect.NewRequest(&pb.SubscribeRequest{Namespace: "default", Topic: store.TopicCancel}))
		if err == nil {
			for sub.Receive() {
			}
			err = sub.Err()
			sub.Close()
		}
		o.ends <- streamEnd{"Subscribe", err, time.Now()}
	}()
	return o
}

// ended waits for the three streams to end and checks that each ended within
// bound of since, the worker streams with unauthenticated.
func (o *openedStreams) ended(t *testing.T, since time.Time, bound time.Duration) {
	t.Helper()
	for range 3 {
		select {
		case e := <-o.ends:
			took := e.at.Sub(since)
			if took > bound {
				t.Errorf("%s stream ended %s after the revocation, want within %s", e.what, took, bound)
			}
			t.Logf("%s stream ended %s after the revocation", e.what, took.Round(time.Millisecond))
			var ce *connect.Error
			if e.what != "SSE" && (!errors.As(e.err, &ce) || ce.Code() != connect.CodeUnauthenticated) {
				t.Errorf("%s stream ended with %v, want unauthenticated", e.what, e.err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("a stream of the revoked token did not end in 10s")
		}
	}
}

// stillOpen checks that none of the streams ended.
func (o *openedStreams) stillOpen(t *testing.T) {
	t.Helper()
	select {
	case e := <-o.ends:
		t.Fatalf("%s stream ended: %v", e.what, e.err)
	default:
	}
}

// Revoking a token through one server ends its open streams (SSE, Claim,
// Subscribe) on another server of the same Postgres store within a second,
// and its next request there is refused; another token's streams stay.
func TestRevocationEndsStreamsOnEveryServer(t *testing.T) {
	t.Parallel()
	pgURL := pgtest.SchemaURL(t)
	st, err := trellis.OpenStore(context.Background(), pgURL, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	_, base1 := storeServer(t, pgURL)
	srv2, base2 := storeServer(t, pgURL)
	admin := tokenSecret(t, st, "admin", auth.Grant{Role: auth.RoleAdmin, Namespace: "*"})
	revoked := tokenSecret(t, st, "doomed", auth.Grant{Role: auth.RoleReader, Namespace: "default"},
		auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
	kept := tokenSecret(t, st, "kept", auth.Grant{Role: auth.RoleReader, Namespace: "default"},
		auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
	c, err := trellis.Open(context.Background(), trellis.Config{Backend: st, Worker: trellis.WorkerOptions{PollInterval: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Register(context.Background(), eventWF); err != nil {
		t.Fatal(err)
	}
	h, err := trellis.Start(context.Background(), c, eventWF, nil)
	if err != nil {
		t.Fatal(err)
	}
	doomed := openAll(t, base2, revoked, h.ID())
	stays := openAll(t, base2, kept, h.ID())
	waitFor(t, "3 streams of each token on server 2", func() bool {
		return srv2.streamsOf("doomed") == 3 && srv2.streamsOf("kept") == 3
	})

	e1 := &env{t: t, base: base1}
	e1.do("POST", "/v1/tokens/doomed/revoke", admin, nil).want(t, 200)
	doomed.ended(t, time.Now(), revocationBound)

	e2 := &env{t: t, base: base2}
	e2.do("GET", "/v1/namespaces/default/runs/"+h.ID(), revoked, nil).problem(t, 401, "unauthenticated")
	e2.do("GET", "/v1/namespaces/default/runs/"+h.ID(), kept, nil).want(t, 200)
	if n := srv2.streamsOf("kept"); n != 3 {
		t.Fatalf("server 2 has %d streams of kept, want 3 (they stay)", n)
	}
	stays.stillOpen(t)
	waitFor(t, "doomed's streams unregistered", func() bool { return srv2.streamsOf("doomed") == 0 })
}

// On the server that revokes it, a token's streams end at once, the UI's
// stream and an HTTP/2 stream (served in the handler, not on a connection of
// its own) included.
func TestRevocationEndsStreamsHere(t *testing.T) {
	t.Parallel()
	sqliteURL := storeURLs(t)["sqlite"](t)
	st, err := trellis.OpenStore(context.Background(), sqliteURL, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// A long cache: only the revocation through this server ends the streams.
	srv, base := storeServer(t, sqliteURL, func(c *Config) {
		c.Authenticator = storeauth.New(c.Backend, storeauth.Config{CacheTTL: time.Hour})
	})
	admin := tokenSecret(t, st, "admin", auth.Grant{Role: auth.RoleAdmin, Namespace: "*"})
	reader := tokenSecret(t, st, "doomed", auth.Grant{Role: auth.RoleReader, Namespace: "default"},
		auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
	run, err := st.RunCreate(context.Background(), &store.RunCreateParams{Namespace: "default", ID: "r1", WorkflowID: "r1", Workflow: "await-go", Queue: "default"})
	if err != nil {
		t.Fatal(err)
	}
	o := openAll(t, base, reader, run.Run.ID)
	e := &env{t: t, base: base, srv: srv}
	u := e.uiSession(reader)
	uiRes, err := u.http.Get(base + "/ui/default/runs/r1/stream")
	if err != nil || uiRes.StatusCode != 200 {
		t.Fatalf("UI stream: %v %v", err, uiRes)
	}
	defer uiRes.Body.Close()
	h2 := &http.Client{Transport: h2cClient().Transport}
	req, _ := http.NewRequest("GET", base+"/v1/namespaces/default/runs/r1/stream", nil)
	req.Header.Set("Authorization", "Bearer "+reader)
	h2Res, err := h2.Do(req)
	if err != nil || h2Res.StatusCode != 200 || h2Res.ProtoMajor != 2 {
		t.Fatalf("HTTP/2 stream: %v %v", err, h2Res)
	}
	defer h2Res.Body.Close()
	waitFor(t, "5 streams of doomed", func() bool { return srv.streamsOf("doomed") == 5 })

	t0 := time.Now()
	e.do("POST", "/v1/tokens/doomed/revoke", admin, nil).want(t, 200)
	for what, res := range map[string]*http.Response{"UI": uiRes, "HTTP/2": h2Res} {
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
		}
		if took := time.Since(t0); took > 200*time.Millisecond {
			t.Errorf("%s stream ended %s after the revocation", what, took)
		}
	}
	o.ended(t, t0, 200*time.Millisecond)
	waitFor(t, "doomed's streams unregistered", func() bool { return srv.streamsOf("doomed") == 0 })
	// Its next request is refused once the Authenticator forgets it (its
	// cache, an hour here; TestRevocationEndsStreamsOnEveryServer).
}

// Signing out of the UI ends the session: the same cookie, replayed on this
// server or on another with the same key and store, is no session any more;
// the stream the session opened ends; another session of the same token goes
// on.
func TestUISignOutEndsSession(t *testing.T) {
	t.Parallel()
	pgURL := pgtest.SchemaURL(t)
	key := make([]byte, UIKeySize)
	same := func(c *Config) { c.UIKey = key }
	srv1, base1 := storeServer(t, pgURL, same)
	_, base2 := storeServer(t, pgURL, same)
	st := srv1.store
	reader := tokenSecret(t, st, "reader", auth.Grant{Role: auth.RoleReader, Namespace: "default"})
	if _, err := st.RunCreate(context.Background(), &store.RunCreateParams{Namespace: "default", ID: "r1", WorkflowID: "r1", Workflow: "await-go", Queue: "default"}); err != nil {
		t.Fatal(err)
	}
	e1 := &env{t: t, base: base1, srv: srv1}
	u, other := e1.uiSession(reader), e1.uiSession(reader)
	cookie := func(u *uiClient) *http.Cookie {
		b, _ := url.Parse(base1)
		for _, c := range u.jar.Cookies(b) {
			if c.Name == sessionCookie {
				return c
			}
		}
		t.Fatal("no session cookie")
		return nil
	}
	stolen := cookie(u)
	page := func(base string, ck *http.Cookie) int {
		req, _ := http.NewRequest("GET", base+"/ui/default/runs", nil)
		req.AddCookie(ck)
		res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, base := range []string{base1, base2} {
		if got := page(base, stolen); got != 200 {
			t.Fatalf("page with the session on %s: %d", base, got)
		}
	}
	stream, err := u.http.Get(base1 + "/ui/default/runs/r1/stream")
	if err != nil || stream.StatusCode != 200 {
		t.Fatalf("UI stream: %v %v", err, stream)
	}
	defer stream.Body.Close()

	t0 := time.Now()
	u.post("/ui/logout", url.Values{"csrf": {u.csrf()}}, base1).want(t, 303)
	// Timed from the sign-out's answer, not its request: under the race
	// detector on a loaded machine the stream once ended 256 ms after the
	// request was sent, the request's own time counted in.
	answered := time.Now()
	sc := bufio.NewScanner(stream.Body)
	for sc.Scan() {
	}
	if took := time.Since(answered); took > 200*time.Millisecond {
		t.Errorf("the session's stream ended %s after the sign-out's answer", took)
	}
	if got := page(base1, stolen); got != 303 {
		t.Errorf("page with the signed-out cookie on the server signed out on: %d, want 303 (to sign in)", got)
	}
	// The other server trusted the session's check for sessionCheckTTL.
	for page(base2, stolen) != 303 {
		if took := time.Since(t0); took > sessionCheckTTL+250*time.Millisecond {
			t.Fatalf("the other server still served the signed-out cookie %s after the sign-out", took)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := page(base1, cookie(other)); got != 200 {
		t.Errorf("another session of the token after the sign-out: %d", got)
	}
}

// flakyAuth is an Authenticator that fails as a store that cannot answer
// does, while down is set.
type flakyAuth struct {
	auth.Authenticator
	down atomic.Bool
}

func (f *flakyAuth) Authenticate(ctx context.Context, token string) (*auth.Principal, error) {
	if f.down.Load() {
		return nil, errors.New("store unavailable")
	}
	return f.Authenticator.Authenticate(ctx, token)
}

// A sign-out while the session's token cannot be checked (the store does not
// answer) still ends the session: its cookie, replayed once the store is back,
// is refused.
func TestUISignOutWhileUnauthenticated(t *testing.T) {
	t.Parallel()
	fa := &flakyAuth{Authenticator: testTokens()}
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.Authenticator = fa })
	u := e.uiSession("reader")
	b, _ := url.Parse(e.base)
	var stolen *http.Cookie
	for _, c := range u.jar.Cookies(b) {
		if c.Name == sessionCookie {
			stolen = c
		}
	}
	fa.down.Store(true)
	if r := u.post("/ui/logout", url.Values{}, e.base); r.status != http.StatusSeeOther {
		t.Fatalf("sign-out: %d %s", r.status, r.body)
	}
	fa.down.Store(false)
	req, _ := http.NewRequest("GET", e.base+"/ui/default/runs", nil)
	req.AddCookie(stolen)
	res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusSeeOther {
		t.Fatalf("the signed-out session's cookie replayed: %d, want a redirect to sign in", res.StatusCode)
	}
}
