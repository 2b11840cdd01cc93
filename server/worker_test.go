package server

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/trellis-dev/trellis/internal/auth"
	pb "github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1"
	"github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1/workerv1connect"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storeremote"
	"google.golang.org/protobuf/types/known/durationpb"
)

// workerCalls makes one valid call of every worker procedure on namespace
// "default" (run is a run of it). A procedure added to the service without an
// entry here fails TestWorkerAuthorizationWalk.
var workerCalls = map[string]func(ctx context.Context, c workerv1connect.WorkerServiceClient, run string) error{
	"Claim": func(ctx context.Context, c workerv1connect.WorkerServiceClient, _ string) error {
		s, err := c.Claim(ctx, connect.NewRequest(&pb.ClaimRequest{Namespace: "default", Workflows: []string{"nobody"}, Worker: "w", Credit: 1,
			LeaseDuration: durationpb.New(time.Second)}))
		if err != nil {
			return err
		}
		defer s.Close()
		for s.Receive() {
		}
		return s.Err()
	},
	"ExtendLeases": func(ctx context.Context, c workerv1connect.WorkerServiceClient, run string) error {
		_, err := c.ExtendLeases(ctx, connect.NewRequest(&pb.ExtendLeasesRequest{Leases: []*pb.Lease{{Namespace: "default", RunId: run, Token: 99}},
			Duration: durationpb.New(time.Second)}))
		return err
	},
	"ReleaseLease": func(ctx context.Context, c workerv1connect.WorkerServiceClient, run string) error {
		_, err := c.ReleaseLease(ctx, connect.NewRequest(&pb.ReleaseLeaseRequest{Lease: &pb.Lease{Namespace: "default", RunId: run, Token: 99}}))
		if connect.CodeOf(err) == connect.CodeAborted { // LEASE_LOST: allowed, and fenced
			return nil
		}
		return err
	},
	"Checkpoint": func(ctx context.Context, c workerv1connect.WorkerServiceClient, run string) error {
		_, err := c.Checkpoint(ctx, connect.NewRequest(&pb.CheckpointRequest{Checkpoints: []*pb.CheckpointItem{
			{Lease: &pb.Lease{Namespace: "default", RunId: run, Token: 99}, Status: "running"}}}))
		return err
	},
	"ResumeBlocked": func(ctx context.Context, c workerv1connect.WorkerServiceClient, _ string) error {
		_, err := c.ResumeBlocked(ctx, connect.NewRequest(&pb.ResumeBlockedRequest{Namespace: "default", Workflows: []string{"nobody"}}))
		return err
	},
	"ListHistory": func(ctx context.Context, c workerv1connect.WorkerServiceClient, run string) error {
		_, err := c.ListHistory(ctx, connect.NewRequest(&pb.ListHistoryRequest{Namespace: "default", Ref: run}))
		return err
	},
	"ListChildren": func(ctx context.Context, c workerv1connect.WorkerServiceClient, run string) error {
		_, err := c.ListChildren(ctx, connect.NewRequest(&pb.ListChildrenRequest{Namespace: "default", Parent: run}))
		return err
	},
	"Subscribe": func(ctx context.Context, c workerv1connect.WorkerServiceClient, _ string) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		s, err := c.Subscribe(ctx, connect.NewRequest(&pb.SubscribeRequest{Namespace: "default", Topic: "ready"}))
		if err != nil {
			return err
		}
		defer s.Close()
		if s.Receive() && s.Msg().Subscribed {
			return nil
		}
		if s.Err() == nil {
			return errors.New("subscription not acknowledged")
		}
		return s.Err()
	},
	"Heartbeat": func(ctx context.Context, c workerv1connect.WorkerServiceClient, _ string) error {
		_, err := c.Heartbeat(ctx, connect.NewRequest(&pb.HeartbeatRequest{Namespace: "default", Name: "w", Workflows: []string{"x"},
			Ttl: durationpb.New(time.Second)}))
		if err != nil {
			return err
		}
		// The record is its maker's: removed, so that the next principal may make it.
		_, err = c.RemoveWorker(ctx, connect.NewRequest(&pb.RemoveWorkerRequest{Namespace: "default", Name: "w"}))
		return err
	},
	"ListWorkers": func(ctx context.Context, c workerv1connect.WorkerServiceClient, _ string) error {
		_, err := c.ListWorkers(ctx, connect.NewRequest(&pb.ListWorkersRequest{Namespace: "default"}))
		return err
	},
	"RemoveWorker": func(ctx context.Context, c workerv1connect.WorkerServiceClient, _ string) error {
		_, err := c.RemoveWorker(ctx, connect.NewRequest(&pb.RemoveWorkerRequest{Namespace: "default", Name: "w"}))
		return err
	},
}

// withToken sends Authorization: Bearer token ("" sends none).
type withToken string

func (tok withToken) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, r connect.AnyRequest) (connect.AnyResponse, error) {
		if tok != "" {
			r.Header().Set("Authorization", "Bearer "+string(tok))
		}
		return next(ctx, r)
	}
}

func (tok withToken) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, s connect.Spec) connect.StreamingClientConn {
		c := next(ctx, s)
		if tok != "" {
			c.RequestHeader().Set("Authorization", "Bearer "+string(tok))
		}
		return c
	}
}

func (tok withToken) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

func (e *env) workerClient(token string, opts ...connect.ClientOption) workerv1connect.WorkerServiceClient {
	return workerv1connect.NewWorkerServiceClient(http.DefaultClient, e.base, append(opts, connect.WithInterceptors(withToken(token)))...)
}

// The walk of the worker protocol: every procedure of the service has a rule,
// and with every role it is allowed exactly when the role is worker or admin;
// a worker grant limited to another queue is refused all but the
// namespace-wide procedures; a grant on another namespace, no token or a wrong
// one are refused. A new procedure without a rule or a call here fails.
func TestWorkerAuthorizationWalk(t *testing.T) {
	e := newBoundaryEnv(t)
	run := e.start("needs-anyone", nil, nil)
	methods := pb.File_trellis_worker_v1_worker_proto.Services().ByName("WorkerService").Methods()
	if methods.Len() != len(workerCalls) || methods.Len() != len(workerRules) {
		t.Errorf("service has %d procedures, the test calls %d, the rules cover %d", methods.Len(), len(workerCalls), len(workerRules))
	}
	roles := []auth.Role{auth.RoleAdmin, auth.RoleProducer, auth.RoleWorker, auth.RoleReader, auth.RoleApprover}
	for i := range methods.Len() {
		name := string(methods.Get(i).Name())
		procedure := "/" + workerv1connect.WorkerServiceName + "/" + name
		if _, ok := workerRules[procedure]; !ok {
			t.Errorf("%s: no authorization rule in workerRules", procedure)
		}
		fn := workerCalls[name]
		if fn == nil {
			t.Errorf("%s: no call in workerCalls", procedure)
			continue
		}
		for _, grpc := range []bool{false, true} {
			var opts []connect.ClientOption
			if grpc {
				opts = append(opts, connect.WithGRPC())
			}
			for _, role := range roles {
				token := string(role)
				allowed := role == auth.RoleAdmin || role == auth.RoleWorker
				err := fn(t.Context(), e.workerClient(token, opts...), run.ID)
				code := connect.CodeOf(err)
				denied := err != nil && (code == connect.CodePermissionDenied || code == connect.CodeUnauthenticated)
				if allowed == denied || allowed && err != nil {
					t.Errorf("%s as %s (grpc %v): %v (allowed by the rules: %v)", name, role, grpc, err, allowed)
				}
			}
			// A worker limited to queue q1 touches no run of queue default
			// (the walk's) and may not act on every queue; it may use the
			// namespace-wide procedures (workerNamespace, and the wake-up
			// topic the walk subscribes to).
			err := fn(t.Context(), e.workerClient("q1-worker", opts...), run.ID)
			if sc := workerRules[procedure]; sc == workerNamespace || sc == workerTopic {
				if err != nil {
					t.Errorf("%s as q1-worker (grpc %v): %v, want allowed", name, grpc, err)
				}
			} else if connect.CodeOf(err) != connect.CodePermissionDenied {
				t.Errorf("%s as q1-worker (grpc %v): %v, want permission_denied", name, grpc, err)
			}
			for token, want := range map[string]connect.Code{"other-reader": connect.CodePermissionDenied,
				"other-worker": connect.CodePermissionDenied,
				"":             connect.CodeUnauthenticated, "wrong": connect.CodeUnauthenticated} {
				if err := fn(t.Context(), e.workerClient(token, opts...), run.ID); connect.CodeOf(err) != want {
					t.Errorf("%s with token %q (grpc %v): %v, want %s", name, token, grpc, err, want)
				}
			}
		}
	}
}

// A procedure without a rule is denied to everyone, even an admin.
func TestWorkerProcedureWithoutRuleIsDenied(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	h := &workerService{s: e.srv}
	hdr := http.Header{"Authorization": {"Bearer admin"}}
	_, err := h.caller(t.Context(), "/"+workerv1connect.WorkerServiceName+"/Ruleless", hdr)
	if code, _ := fail(err).(*connect.Error); code == nil || code.Code() != connect.CodePermissionDenied {
		t.Fatalf("ruleless procedure: %v", err)
	}
}

// A worker whose grant names a queue claims from that queue only, and must
// name it: a claim of every queue is refused.
func TestWorkerQueueRestrictedClaim(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) {
		c.Authenticator = tokens{"q1-worker": {Name: "q1w", Grants: []auth.Grant{{Role: auth.RoleWorker, Namespace: "default", Queue: "q1"}}}}
	})
	c := e.workerClient("q1-worker")
	claim := func(queues ...string) error {
		s, err := c.Claim(t.Context(), connect.NewRequest(&pb.ClaimRequest{Namespace: "default", Queues: queues, Workflows: []string{"x"},
			Worker: "w", Credit: 1, LeaseDuration: durationpb.New(time.Second)}))
		if err != nil {
			return err
		}
		defer s.Close()
		for s.Receive() {
		}
		return s.Err()
	}
	if err := claim("q1"); err != nil {
		t.Errorf("claim of q1: %v", err)
	}
	for _, qs := range [][]string{nil, {"q2"}, {"q1", "q2"}} {
		if err := claim(qs...); connect.CodeOf(err) != connect.CodePermissionDenied {
			t.Errorf("claim of %v: %v, want permission_denied", qs, err)
		}
	}
}

// A worker's unary calls count in MaxInFlight: with every slot taken, one is
// refused at once with resource_exhausted (RATE_LIMITED), and accepted again
// once a slot frees; the long Claim stream is not counted.
func TestWorkerCallsCountInFlight(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.MaxInFlight = 2 })
	c := e.workerClient("admin")
	call := func() error {
		_, err := c.ResumeBlocked(t.Context(), connect.NewRequest(&pb.ResumeBlockedRequest{Namespace: "default", Workflows: []string{"x"}}))
		return err
	}
	if err := call(); err != nil {
		t.Fatalf("with free slots: %v", err)
	}
	for range cap(e.srv.inFlight) {
		e.srv.inFlight <- struct{}{}
	}
	err := call()
	var ce *connect.Error
	if !errors.As(err, &ce) || ce.Code() != connect.CodeResourceExhausted || !strings.Contains(err.Error(), "in flight") {
		t.Fatalf("with every slot taken: %v, want resource_exhausted", err)
	}
	s, err := c.Claim(t.Context(), connect.NewRequest(&pb.ClaimRequest{Namespace: "default", Workflows: []string{"x"},
		Worker: "w", Credit: 1, LeaseDuration: durationpb.New(time.Second)}))
	if err != nil {
		t.Fatal(err)
	}
	for s.Receive() {
	}
	if err := s.Err(); err != nil {
		t.Fatalf("a claim with every slot taken: %v", err)
	}
	s.Close()
	// The remote store sends a refused call again: it succeeds once slots free.
	rs, err := storeremote.New(storeremote.Config{URL: e.base, Namespace: "default", Token: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	go func() {
		time.Sleep(30 * time.Millisecond)
		for range cap(e.srv.inFlight) {
			<-e.srv.inFlight
		}
	}()
	if _, err := rs.RunsResumeBlocked(t.Context(), &store.RunsResumeBlockedParams{Namespace: "default", Workflows: []string{"x"}}); err != nil {
		t.Fatalf("the remote store's call, sent again once slots free: %v", err)
	}
	if err := call(); err != nil {
		t.Fatalf("once slots free: %v", err)
	}
}

// A long stream has no deadline while it is idle: with a write timeout of 100ms,
// a subscription idle for far longer still delivers the next signal, over
// HTTP/1.1 (Connect) and over HTTP/2 (gRPC, cleartext).
func TestWorkerStreamIdleOutlivesWriteTimeout(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.WorkerStreamWriteTimeout = 100 * time.Millisecond })
	h2 := &http.Transport{Protocols: new(http.Protocols)}
	h2.Protocols.SetUnencryptedHTTP2(true)
	defer h2.CloseIdleConnections()
	for name, c := range map[string]workerv1connect.WorkerServiceClient{
		"connect over HTTP/1.1": e.workerClient("admin"),
		"grpc over HTTP/2": workerv1connect.NewWorkerServiceClient(&http.Client{Transport: h2}, e.base,
			connect.WithGRPC(), connect.WithInterceptors(withToken("admin"))),
	} {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		s, err := c.Subscribe(ctx, connect.NewRequest(&pb.SubscribeRequest{Namespace: "default", Topic: "ready"}))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !s.Receive() || !s.Msg().Subscribed {
			t.Fatalf("%s: not acknowledged: %v", name, s.Err())
		}
		time.Sleep(500 * time.Millisecond) // idle, five write timeouts long
		e.start("await-go", nil, nil)      // a new run signals ready
		if !s.Receive() {
			t.Fatalf("%s: no signal after an idle spell: %v", name, s.Err())
		}
		s.Close()
		cancel()
	}
}

// panicClaims is a real store whose claims panic.
type panicClaims struct{ store.Store }

func (panicClaims) RunsClaim(context.Context, *store.RunsClaimParams) (*store.RunsClaimResult, error) {
	panic("claims are broken")
}

// lockedBuffer is a bytes.Buffer safe for a logger's concurrent writes.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A worker call whose handler panics is answered with an internal error, and
// the server logs the panic with the procedure and its stack; the server goes
// on serving.
func TestWorkerHandlerPanicIsLogged(t *testing.T) {
	var logs lockedBuffer
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) {
		c.Backend = panicClaims{c.Backend}
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	c := e.workerClient("worker")
	s, err := c.Claim(t.Context(), connect.NewRequest(&pb.ClaimRequest{Namespace: "default", Workflows: []string{"x"},
		Worker: "w", Credit: 1, LeaseDuration: durationpb.New(time.Second)}))
	if err == nil {
		for s.Receive() {
		}
		err = s.Err()
		s.Close()
	}
	if connect.CodeOf(err) != connect.CodeInternal {
		t.Fatalf("claim whose handler panicked: %v, want internal", err)
	}
	if l := logs.String(); !strings.Contains(l, "handler panicked") || !strings.Contains(l, "claims are broken") ||
		!strings.Contains(l, "WorkerService/Claim") {
		t.Fatalf("log: %s", l)
	}
	if _, err := c.Heartbeat(t.Context(), connect.NewRequest(&pb.HeartbeatRequest{Namespace: "default", Name: "w", Start: true,
		Ttl: durationpb.New(time.Second)})); err != nil {
		t.Fatalf("a call after the panic: %v", err)
	}
}

// TestClaimAfterReady pins the claim gap of a claim stream: a ready signal
// claims at once when claimGap has passed since the last claim, and otherwise
// waits out the rest of the gap, so that the signals of a burst share a claim.
func TestClaimAfterReady(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		since    time.Duration
		claimNow bool
		wait     time.Duration
	}{
		{0, false, claimGap},
		{time.Millisecond, false, claimGap - time.Millisecond},
		{claimGap - time.Microsecond, false, time.Microsecond},
		{claimGap, true, 0},
		{time.Second, true, 0},
	}
	for _, c := range cases {
		now, wait := claimAfterReady(t0.Add(c.since), t0)
		if now != c.claimNow || wait != c.wait {
			t.Errorf("signal %v after the last claim: claim now %v, wait %v; want %v, %v", c.since, now, wait, c.claimNow, c.wait)
		}
	}
}
