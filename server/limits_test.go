package server

import (
	"context"
	"errors"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/internal/auth/storeauth"
	"github.com/trellis-dev/trellis/internal/clock"
	pb "github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1"
	"github.com/trellis-dev/trellis/store"
	"google.golang.org/protobuf/types/known/durationpb"
)

// wantRetryAfter checks a refusal's Retry-After: whole seconds, at least 1.
func wantRetryAfter(t *testing.T, v string) {
	t.Helper()
	if n, err := strconv.Atoi(v); err != nil || n < 1 {
		t.Fatalf("Retry-After %q, want whole seconds >= 1", v)
	}
}

// wantExhausted checks a worker call's refusal by a cap per principal.
func wantExhausted(t *testing.T, err error) {
	t.Helper()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted {
		t.Fatalf("got %v, want resource_exhausted", err)
	}
	wantRetryAfter(t, ce.Meta().Get("Retry-After"))
}

// A principal past its rate gets 429 rate_limited with Retry-After, on the
// API, the UI and the worker protocol; another principal is not slowed; a
// request with an unknown token is refused without a bucket being made for
// it.
func TestPrincipalRate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.PrincipalRate, c.PrincipalBurst = 0.5, 3 })
	for range 3 {
		e.do("GET", "/v1/namespaces/default/runs", "reader", nil).want(t, 200)
	}
	r := e.do("GET", "/v1/namespaces/default/runs", "reader", nil)
	p := r.problem(t, 429, "rate_limited")
	wantRetryAfter(t, r.header.Get("Retry-After"))
	if r.header.Get("Retry-After") != "2" {
		t.Errorf("Retry-After %q, want 2 (a token every 2s)", r.header.Get("Retry-After"))
	}
	t.Logf("refusal: %s", p.Detail)
	e.do("GET", "/v1/namespaces/default/runs", "global-reader", nil).want(t, 200)

	u := e.uiSession("q1-reader") // the sign-in is public: not counted
	for range 3 {
		u.get("/ui/default/runs?queue=q1").want(t, 200)
	}
	if r := u.get("/ui/default/runs?queue=q1"); r.status != 429 || r.header.Get("Retry-After") == "" {
		t.Fatalf("UI past the rate: %d %q", r.status, r.header.Get("Retry-After"))
	}

	c := e.workerClient("worker")
	list := func() error {
		_, err := c.ListWorkers(t.Context(), connect.NewRequest(&pb.ListWorkersRequest{Namespace: "default"}))
		return err
	}
	for range 3 {
		if err := list(); err != nil {
			t.Fatal(err)
		}
	}
	wantExhausted(t, list())
	sub, err := c.Subscribe(t.Context(), connect.NewRequest(&pb.SubscribeRequest{Namespace: "default", Topic: store.TopicReady}))
	if err == nil {
		sub.Receive()
		err = sub.Err()
		sub.Close()
	}
	wantExhausted(t, err)

	buckets := func() int {
		e.srv.rates.mu.Lock()
		defer e.srv.rates.mu.Unlock()
		return len(e.srv.rates.m)
	}
	before := buckets()
	for i := range 50 {
		e.do("GET", "/v1/namespaces/default/runs", "garbage-"+strconv.Itoa(i), nil).problem(t, 401, "unauthenticated")
	}
	if after := buckets(); after != before {
		t.Fatalf("unknown tokens made %d buckets", after-before)
	}
}

// A principal holds at most MaxStreamsPerPrincipal streams open: SSE streams
// and worker streams together. One more is refused (429 with Retry-After;
// resource_exhausted on the worker protocol) and a stream that ends frees its
// place. Another principal has places of its own.
func TestPrincipalStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.MaxStreamsPerPrincipal, c.StreamProbeInterval = 2, 20*time.Millisecond })
	run := e.start("await-go", nil, nil)
	path := "/v1/namespaces/default/runs/" + run.ID + "/stream"
	a := e.openStream(run.ID, "", "admin")
	c := e.workerClient("admin")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	sub, err := c.Subscribe(ctx, connect.NewRequest(&pb.SubscribeRequest{Namespace: "default", Topic: store.TopicCancel}))
	if err != nil || !sub.Receive() || !sub.Msg().Subscribed {
		t.Fatalf("subscribe: %v %v", err, sub.Err())
	}
	r := e.streamHead(path, "admin")
	r.problem(t, 429, "rate_limited")
	wantRetryAfter(t, r.header.Get("Retry-After"))
	claim, err := c.Claim(t.Context(), connect.NewRequest(&pb.ClaimRequest{Namespace: "default", Workflows: []string{"x"},
		Worker: "w", Credit: 1, LeaseDuration: durationpb.New(time.Second), Wait: durationpb.New(time.Minute)}))
	if err == nil {
		for claim.Receive() {
		}
		err = claim.Err()
		claim.Close()
	}
	wantExhausted(t, err)
	e.streamHead(path, "reader").want(t, 200) // another principal
	if n := e.srv.streamsOf("root"); n != 2 {
		t.Fatalf("root has %d streams registered, want 2", n)
	}

	a.close()
	waitFor(t, "the closed stream's place", func() bool { return e.srv.streamsOf("root") == 1 })
	b := e.openStream(run.ID, "", "admin")
	cancel() // the subscription goes
	sub.Close()
	waitFor(t, "the subscription's place", func() bool { return e.srv.streamsOf("root") == 1 })
	b.close()
	waitFor(t, "every place", func() bool { return e.srv.streamsOf("root") == 0 })
}

// waitFor waits up to 5s for cond, checking every 10ms.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not in 5s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Under Insecure every request is the same principal: no cap per principal
// applies (the server's own caps do).
func TestInsecureHasNoPrincipalCaps(t *testing.T) {
	t.Parallel()
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) {
		c.Insecure, c.Authenticator = true, nil
		c.MaxStreamsPerPrincipal, c.PrincipalRate, c.PrincipalBurst = 1, 0.001, 1
	})
	var run trellis.Run
	e.do("POST", "/v1/namespaces/default/runs", "", map[string]any{"workflow": "await-go"}).want(t, 201).decode(t, &run)
	for range 3 {
		e.do("GET", "/v1/namespaces/default/runs/"+run.ID, "", nil).want(t, 200)
	}
	e.openStream(run.ID, "", "")
	e.openStream(run.ID, "", "")
}

// A Subscribe stream that delivered nothing for WorkerStreamIdleTimeout ends
// with its reconnect message; one that delivers stays open. The server's clock
// is a fake one, moved by the test: the timeout is exact and nothing sleeps.
func TestWorkerSubscribeIdleTimeout(t *testing.T) {
	t.Parallel()
	const idle = time.Minute
	clk := clock.NewFake(time.Now())
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.WorkerStreamIdleTimeout, c.Clock = idle, clk })
	c := e.workerClient("worker")
	s, err := c.Subscribe(t.Context(), connect.NewRequest(&pb.SubscribeRequest{Namespace: "default", Topic: store.TopicReady}))
	if err != nil || !s.Receive() || !s.Msg().Subscribed {
		t.Fatalf("subscribe: %v %v", err, s.Err())
	}
	defer s.Close()
	signal := func() {
		t.Helper()
		e.start("await-go", nil, nil) // a new run signals ready
		if !s.Receive() || s.Msg().Reconnect {
			t.Fatalf("a delivering stream ended: %v", s.Err())
		}
	}
	// Signals within the timeout keep it open past it: three half timeouts.
	for range 3 {
		waitTimerAt(t, clk, clk.Now().Add(idle)) // armed (again) by the last message
		clk.Advance(idle / 2)
		signal()
	}
	// Not ended a moment before the timeout...
	waitTimerAt(t, clk, clk.Now().Add(idle))
	clk.Advance(idle - time.Nanosecond)
	signal()
	// ...ended at it. The runs started above may signal ready again after
	// the message the test took for each (their worker at work: two or three
	// such messages came in this last phase); one that comes as the clock
	// reaches the timeout is a delivery, and the stream rightly waits a whole
	// timeout more (its reset drops the fire not yet received, as with
	// time.Timer): the clock then moves on again, rather than the test
	// waiting for ever (it hung so under load, 1 run in a few hundred).
	msgs := make(chan *pb.SubscribeResponse, 16)
	go func() {
		defer close(msgs)
		for s.Receive() {
			msgs <- s.Msg()
		}
	}()
	deadline := time.After(30 * time.Second)
	for reconnected := false; !reconnected; {
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatalf("the stream ended without a reconnect: %v", s.Err())
			}
			reconnected = m.Reconnect
			continue
		case <-deadline:
			t.Fatal("no reconnect in 30s")
		case <-time.After(time.Millisecond):
		}
		if clk.TimerAt(clk.Now().Add(idle)) { // armed by the stream's last message
			clk.Advance(idle)
		}
	}
	if m, ok := <-msgs; ok {
		t.Fatalf("a message after the reconnect: %v", m)
	}
	if s.Err() != nil {
		t.Fatalf("idle stream ended with %v", s.Err())
	}
}

// waitTimerAt waits up to 5s for code under test to arm a timer of clk that
// fires at at.
func waitTimerAt(t *testing.T, clk *clock.Fake, at time.Time) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		armed := clk.TimerAdded()
		if clk.TimerAt(at) {
			return
		}
		select {
		case <-armed:
		case <-deadline:
			t.Fatalf("no timer armed to fire at %s in 5s", at)
		}
	}
}

// The token buckets are bounded: past maxLimiters principals the full (idle)
// buckets are dropped, and a busy principal keeps its state.
func TestRateLimiterBounded(t *testing.T) {
	t.Parallel()
	l := newRateLimiter(1, 2)
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	p := func(name string) *auth.Principal { return &auth.Principal{Name: name} }
	for i := range maxLimiters - 1 {
		if err := l.allow(p("idle-"+strconv.Itoa(i)), t0); err != nil {
			t.Fatal(err)
		}
	}
	hot := p("hot")
	l.allow(hot, t0.Add(10*time.Second))
	l.allow(hot, t0.Add(10*time.Second))
	if err := l.allow(hot, t0.Add(10*time.Second)); err == nil {
		t.Fatal("the hot principal's third request in a burst of 2 passed")
	}
	// Full: the next principal drops the idle buckets (full again by now).
	if err := l.allow(p("new"), t0.Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := len(l.m); n != 2 {
		t.Fatalf("%d buckets after the drop, want 2 (hot and new)", n)
	}
	if err := l.allow(hot, t0.Add(10*time.Second)); err == nil {
		t.Fatal("the drop forgot the hot principal's state")
	}
	if newRateLimiter(-1, 0).allow(hot, t0) != nil {
		t.Fatal("no limit refused a request")
	}
}

// countingTokens counts the token reads of a store.
type countingTokens struct {
	store.Store
	reads atomic.Int64
}

func (c *countingTokens) TokenByHash(ctx context.Context, p *store.TokenByHashParams) (*store.Token, error) {
	c.reads.Add(1)
	return c.Store.TokenByHash(ctx, p)
}

// A flood of distinct well-formed unknown secrets from one source costs no
// store read each: after DefaultUnknownLookupBurst misses its credentials are
// refused 429 with Retry-After without a read; another source's token works,
// and one unknown secret sent again and again costs one read. The server's
// clock is a fake one: the buckets do not refill while requests run, and the
// cache entry ends when the clock is moved past it.
func TestUnknownTokenFloodCostsNoReadEach(t *testing.T) {
	t.Parallel()
	var counted *countingTokens
	clk := clock.NewFake(time.Now())
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) {
		c.Clock = clk
		counted = &countingTokens{Store: c.Backend}
		c.Backend, c.Authenticator = counted, nil // the server's own Authenticator
		c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
	})
	secret, hash, _ := auth.NewToken()
	if _, err := e.st.TokenCreate(t.Context(), &store.TokenCreateParams{Name: "good", Hash: hash,
		Grants: []auth.Grant{{Role: auth.RoleReader, Namespace: "default"}}}); err != nil {
		t.Fatal(err)
	}
	// The token is used from the flooding source before the flood: found
	// live, it is read again freely once its cache entry ends.
	e.do("GET", "/v1/namespaces/default/runs", secret, nil, "X-Forwarded-For", "10.0.0.1").want(t, 200)
	const flood = 3 * DefaultUnknownLookupBurst
	refused := 0
	for range flood {
		random, _, _ := auth.NewToken()
		r := e.do("GET", "/v1/namespaces/default/runs", random, nil, "X-Forwarded-For", "10.0.0.1")
		switch r.status {
		case 401:
		case 429:
			refused++
			if r.header.Get("Retry-After") == "" {
				t.Fatal("429 without Retry-After")
			}
		default:
			t.Fatalf("unknown token: %d %s", r.status, r.body)
		}
	}
	// The good token's read, then one per unknown secret until the bucket is
	// empty; the clock does not move, so the bucket does not refill.
	if reads := counted.reads.Load(); reads != 1+DefaultUnknownLookupBurst || refused != flood-DefaultUnknownLookupBurst {
		t.Fatalf("%d distinct unknown secrets: %d store reads, %d refused 429; want %d and %d",
			flood, reads, refused, 1+DefaultUnknownLookupBurst, flood-DefaultUnknownLookupBurst)
	}
	e.do("GET", "/v1/namespaces/default/runs", secret, nil, "X-Forwarded-For", "10.0.0.2").want(t, 200)
	clk.Advance(storeauth.DefaultCacheTTL + time.Second) // its cache entry ends; the buckets refill
	before := counted.reads.Load()
	e.do("GET", "/v1/namespaces/default/runs", secret, nil, "X-Forwarded-For", "10.0.0.1").want(t, 200)
	if reads := counted.reads.Load() - before; reads != 1 {
		t.Fatalf("the good token past its cache entry: %d store reads, want 1", reads)
	}
	// An IPv6 source is its /64: another address of it shares the bucket.
	// (Drained until refused, then another address of the /64 is refused
	// too: with a bucket of its own it would have a whole burst.)
	for i := 0; ; i++ {
		random, _, _ := auth.NewToken()
		if e.do("GET", "/v1/namespaces/default/runs", random, nil, "X-Forwarded-For", "2001:db8::1").status == 429 {
			break
		}
		if i > 2*DefaultUnknownLookupBurst {
			t.Fatal("2001:db8::1 never refused")
		}
	}
	refused = 0
	for range 10 {
		random, _, _ := auth.NewToken()
		if e.do("GET", "/v1/namespaces/default/runs", random, nil, "X-Forwarded-For", "2001:db8::2").status == 429 {
			refused++
		}
	}
	if refused != 10 {
		t.Fatalf("2001:db8::2 after 2001:db8::1 drained the /64's bucket: %d of 10 refused", refused)
	}
	random, _, _ := auth.NewToken()
	before = counted.reads.Load()
	for range 100 {
		e.do("GET", "/v1/namespaces/default/runs", random, nil, "X-Forwarded-For", "10.0.0.3").want(t, 401)
	}
	if reads := counted.reads.Load() - before; reads > 2 {
		t.Fatalf("one unknown secret sent 100 times: %d store reads, want 1 (remembered)", reads)
	}
}
