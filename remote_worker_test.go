package trellis_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/internal/workerwire"
	"github.com/trellis-dev/trellis/server"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storeremote"
)

// Remote workers: workers that run their workflows through a server's worker
// protocol, holding a token and no database credentials.

// workerServer is a listening server on a fresh store, with the store's tokens.
type workerServer struct {
	base string
	st   store.Store
	srv  *server.Server
}

func newWorkerServer(t *testing.T, url string) *workerServer {
	t.Helper()
	return newWorkerServerWith(t, url, nil)
}

// newWorkerServerWith is newWorkerServer with the configuration changed by mod.
func newWorkerServerWith(t *testing.T, url string, mod func(*server.Config)) *workerServer {
	t.Helper()
	st := openStore(t, url)
	cfg := server.Config{Backend: st, Listen: "127.0.0.1:0", MaxWait: 5 * time.Second}
	if mod != nil {
		mod(&cfg)
	}
	srv, err := server.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return &workerServer{base: "http://" + srv.Addr().String(), st: st, srv: srv}
}

// token creates a token with grants and returns its secret.
func (s *workerServer) token(t *testing.T, name string, grants ...auth.Grant) string {
	t.Helper()
	secret, hash, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.st.TokenCreate(context.Background(), &store.TokenCreateParams{Name: name, Hash: hash, Grants: grants}); err != nil {
		t.Fatal(err)
	}
	return secret
}

// startRemoteWorker starts a remote worker of the server with token, running until
// cleanup.
func startRemoteWorker(t *testing.T, base, token string, wfs ...trellis.Registrable) *trellis.Worker {
	t.Helper()
	cfg := trellis.Config{Server: base, Token: token}
	cfg.Worker.MaxInlineBackoff = 20 * time.Millisecond
	cfg.Worker.ShutdownGrace = 2 * time.Second
	cfg.Worker.LeaseDuration = 2 * time.Second
	return startRemoteWorkerWith(t, cfg, wfs...)
}

// startRemoteWorkerWith is startRemoteWorker with a configuration of the
// caller's.
func startRemoteWorkerWith(t *testing.T, cfg trellis.Config, wfs ...trellis.Registrable) *trellis.Worker {
	t.Helper()
	w, err := trellis.NewWorker(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(context.Background(), wfs...); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("remote worker: %v", err)
		}
	})
	return w
}

// remoteStores names the stores the remote worker tests run on.
func remoteStores() map[string]func(t *testing.T) string {
	return map[string]func(t *testing.T) string{
		"sqlite":   func(t *testing.T) string { return sqliteURL(t) },
		"postgres": func(t *testing.T) string { return pgtest.SchemaURL(t) },
	}
}

// remoteFlow has steps, a durable sleep and an event: everything a remote
// worker does through the protocol (claim, checkpoints, wake-ups, history).
var remoteFlow = trellis.NewWorkflow("remote-flow", func(wc *trellis.Context, in string) (string, error) {
	a, err := trellis.Step(wc, "a", func(context.Context) (string, error) { return "a:" + in, nil })
	if err != nil {
		return "", err
	}
	if err := wc.Sleep(100 * time.Millisecond); err != nil { // over MaxInlineBackoff: a durable timer
		return "", err
	}
	ev, err := trellis.WaitEvent[string](wc, "go", 0)
	if err != nil {
		return "", err
	}
	return trellis.Step(wc, "b", func(context.Context) (string, error) { return a + "," + ev, nil })
})

// A remote worker runs the same workflow code as an embedded one: steps, a
// durable sleep and an event, through a real listening server on SQLite and
// on Postgres; each step is recorded once.
func TestRemoteWorkerRunsWorkflows(t *testing.T) {
	for name, url := range remoteStores() {
		t.Run(name, func(t *testing.T) {
			s := newWorkerServer(t, url(t))
			wtok := s.token(t, "w", auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
			ptok := s.token(t, "p", auth.Grant{Role: auth.RoleProducer, Namespace: "default"}, auth.Grant{Role: auth.RoleReader, Namespace: "default"})
			startRemoteWorker(t, s.base, wtok, remoteFlow)
			c, err := trellis.Open(context.Background(), trellis.Config{Server: s.base, Token: ptok})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			var hs []*trellis.Handle[string]
			for i := range 5 {
				h, err := trellis.Start(ctxT(t), c, remoteFlow, fmt.Sprint(i))
				if err != nil {
					t.Fatal(err)
				}
				hs = append(hs, h)
			}
			for _, h := range hs {
				run := waitStatus(t, c, h.RunID(), trellis.StatusWaiting)
				if !strings.Contains(run.WaitReason, "go") {
					// Still in the durable sleep: wait for the event wait.
					deadline := time.Now().Add(10 * time.Second)
					for !strings.Contains(run.WaitReason, "go") && time.Now().Before(deadline) {
						time.Sleep(10 * time.Millisecond)
						if run, err = c.Get(ctxT(t), h.RunID()); err != nil {
							t.Fatal(err)
						}
					}
				}
				if err := c.SendEvent(ctxT(t), h.RunID(), "go", "ev"); err != nil {
					t.Fatal(err)
				}
			}
			for i, h := range hs {
				out, err := h.Result(ctxT(t))
				if err != nil {
					t.Fatalf("run %d: %v", i, err)
				}
				if want := fmt.Sprintf("a:%d,ev", i); out != want {
					t.Errorf("run %d = %q, want %q", i, out, want)
				}
				hist, err := c.History(ctxT(t), h.RunID())
				if err != nil {
					t.Fatal(err)
				}
				steps := map[string]int{}
				for _, op := range hist {
					if op.Kind == trellis.OpStep {
						steps[op.Name]++
						if op.Attempts != 1 || !op.Done {
							t.Errorf("run %d step %s: attempts %d, done %v", i, op.Name, op.Attempts, op.Done)
						}
					}
				}
				if steps["a"] != 1 || steps["b"] != 1 {
					t.Errorf("run %d: steps recorded %v, want a and b once", i, steps)
				}
			}
		})
	}
}

// On Shutdown the server ends the workers' streams at once, telling them to
// reconnect; a worker reconnects with backoff to the server started again on
// the same address and goes on running runs.
func TestRemoteWorkerReconnects(t *testing.T) {
	st := openStore(t, sqliteURL(t))
	serve := func(listen string) *server.Server {
		srv, err := server.New(context.Background(), server.Config{Backend: st, Listen: listen})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(); err != nil {
			t.Fatal(err)
		}
		return srv
	}
	srv := serve("127.0.0.1:0")
	addr := srv.Addr().String()
	base := "http://" + addr
	s := &workerServer{base: base, st: st, srv: srv}
	wtok := s.token(t, "w", auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
	ptok := s.token(t, "p", auth.Grant{Role: auth.RoleProducer, Namespace: "default"}, auth.Grant{Role: auth.RoleReader, Namespace: "default"})
	var srv2 *server.Server
	t.Cleanup(func() { // after the worker's stop (cleanups run last first)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if srv2 != nil {
			srv2.Shutdown(ctx)
		}
	})
	startRemoteWorker(t, base, wtok, remoteEcho)
	c, err := trellis.Open(context.Background(), trellis.Config{Server: base, Token: ptok})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	echo := func(v string) {
		t.Helper()
		h, err := trellis.Start(ctxT(t), c, remoteEcho, map[string]any{"v": v})
		if err != nil {
			t.Fatal(err)
		}
		if out, err := h.Result(ctxT(t)); err != nil || out["v"] != v {
			t.Fatalf("echo %s = %v, %v", v, out, err)
		}
	}
	echo("before")
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(began); d > 3*time.Second {
		t.Errorf("shutdown took %s with a worker connected: its streams did not end", d)
	}
	time.Sleep(200 * time.Millisecond) // the worker retries meanwhile
	srv2 = serve(addr)
	echo("after")
}

// Calls without a token, with a wrong or revoked one, or with a token that is
// not a worker's on the namespace and queue are refused, and change nothing.
func TestRemoteWorkerRejectsBadTokens(t *testing.T) {
	s := newWorkerServer(t, sqliteURL(t))
	wtok := s.token(t, "w", auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
	rtok := s.token(t, "r", auth.Grant{Role: auth.RoleReader, Namespace: "default"}, auth.Grant{Role: auth.RoleProducer, Namespace: "default"})
	otok := s.token(t, "o", auth.Grant{Role: auth.RoleWorker, Namespace: "other"})
	qtok := s.token(t, "q", auth.Grant{Role: auth.RoleWorker, Namespace: "default", Queue: "q1"})
	revoked := s.token(t, "gone", auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
	if _, err := s.st.TokenRevoke(context.Background(), &store.TokenRevokeParams{Name: "gone"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.st.RunCreate(context.Background(), &store.RunCreateParams{Namespace: "default", ID: "r1", WorkflowID: "r1", Workflow: "wf", Queue: "default"}); err != nil {
		t.Fatal(err)
	}
	claim := func(token string, queues ...string) (*store.RunsClaimResult, error) {
		rs, err := storeremote.New(storeremote.Config{URL: s.base, Token: token})
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		return rs.RunsClaim(ctxT(t), &store.RunsClaimParams{Namespace: "default", Queues: queues, Workflows: []string{"wf"},
			Worker: "w1", Max: 10, LeaseDuration: time.Minute})
	}
	for name, c := range map[string]struct {
		token  string
		queues []string
		want   error
		code   connect.Code
	}{
		"no token":          {"", nil, auth.ErrUnauthenticated, connect.CodeUnauthenticated},
		"wrong token":       {"trellis_wrong", nil, auth.ErrUnauthenticated, connect.CodeUnauthenticated},
		"revoked token":     {revoked, nil, auth.ErrUnauthenticated, connect.CodeUnauthenticated},
		"reader+producer":   {rtok, nil, nil, connect.CodePermissionDenied},
		"other namespace":   {otok, nil, nil, connect.CodePermissionDenied},
		"queue-only worker": {qtok, []string{"default"}, nil, connect.CodePermissionDenied},
	} {
		_, err := claim(c.token, c.queues...)
		var we *workerwire.Error
		if !errors.As(err, &we) || we.Code != c.code {
			t.Errorf("%s: %v, want %s", name, err, c.code)
		}
		if c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v is not %v", name, err, c.want)
		}
	}
	if run, err := s.st.RunGet(context.Background(), &store.RunGetParams{Namespace: "default", Ref: "r1"}); err != nil || run.Status != store.StatusPending {
		t.Fatalf("after refused claims: %+v, %v; want the run pending", run, err)
	}
	res, err := claim(wtok)
	if err != nil || len(res.Runs) != 1 {
		t.Fatalf("worker claim: %+v, %v", res, err)
	}
}

// Every write carries its lease token: a stale one is refused with
// store.ErrLeaseLost (reason LEASE_LOST) and writes nothing.
func TestRemoteWorkerStaleLeaseToken(t *testing.T) {
	s := newWorkerServer(t, sqliteURL(t))
	wtok := s.token(t, "w", auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
	rs, err := storeremote.New(storeremote.Config{URL: s.base, Token: wtok})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	ctx := ctxT(t)
	if _, err := s.st.RunCreate(ctx, &store.RunCreateParams{Namespace: "default", ID: "r1", WorkflowID: "r1", Workflow: "wf", Queue: "default"}); err != nil {
		t.Fatal(err)
	}
	claimP := &store.RunsClaimParams{Namespace: "default", Workflows: []string{"wf"}, Worker: "w1", Max: 1, LeaseDuration: 50 * time.Millisecond}
	res, err := rs.RunsClaim(ctx, claimP)
	if err != nil || len(res.Runs) != 1 {
		t.Fatalf("claim: %+v, %v", res, err)
	}
	stale := store.Lease{Namespace: "default", RunID: "r1", Token: res.Runs[0].LeaseToken}
	time.Sleep(100 * time.Millisecond) // the lease expires; another claim takes the run
	claimP.Worker = "w2"
	res2, err := rs.RunsClaim(ctx, claimP)
	if err != nil || len(res2.Runs) != 1 || res2.Runs[0].LeaseToken == stale.Token {
		t.Fatalf("takeover claim: %+v, %v", res2, err)
	}
	_, err = rs.Checkpoint(ctx, &store.CheckpointParams{Lease: stale, Status: store.StatusSucceeded, Output: []byte(`1`),
		Ops: []*store.Op{{Position: 0, Kind: store.OpStep, Name: "s", Done: true, Attempts: 1}}})
	if !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("checkpoint with a stale token: %v, want ErrLeaseLost", err)
	}
	if err := rs.LeaseRelease(ctx, &store.LeaseReleaseParams{Lease: stale}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("release with a stale token: %v, want ErrLeaseLost", err)
	}
	ext, err := rs.LeasesExtend(ctx, &store.LeasesExtendParams{Leases: []store.Lease{stale}, Duration: time.Minute})
	if err != nil || len(ext.Lost) != 1 {
		t.Fatalf("extend with a stale token: %+v, %v; want it lost", ext, err)
	}
	run, err := s.st.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: "r1"})
	if err != nil || run.Status != store.StatusRunning || run.LeaseOwner != "w2" {
		t.Fatalf("run after stale writes: %+v, %v", run, err)
	}
	if ops, _ := s.st.HistoryList(ctx, &store.HistoryListParams{Namespace: "default", Ref: "r1"}); len(ops) != 0 {
		t.Fatalf("stale checkpoint wrote %d ops", len(ops))
	}
}

// The remote crash test: remote worker processes, each holding only the
// server's URL and a token, are SIGKILLed mid-step while runs are started;
// every run is taken over and finishes with each step recorded once.

const (
	envRemoteCrashServer = "TRELLIS_REMOTE_CRASH_SERVER"
	envRemoteCrashToken  = "TRELLIS_REMOTE_CRASH_TOKEN"
	remoteCrashRuns      = 300
)

// TestRemoteCrashWorkerProcess is the remote worker process of
// TestRemoteWorkerCrash; it runs until killed.
func TestRemoteCrashWorkerProcess(t *testing.T) {
	base := os.Getenv(envRemoteCrashServer)
	if base == "" {
		t.Skip("runs only as the worker process of TestRemoteWorkerCrash")
	}
	cfg := trellis.Config{Server: base, Token: os.Getenv(envRemoteCrashToken)}
	cfg.Worker.LeaseDuration = time.Second
	w, err := trellis.NewWorker(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(context.Background(), crashWorkflow(os.Getenv(envCrashEffects))); err != nil {
		t.Fatal(err)
	}
	select {} // until SIGKILL
}

func TestRemoteWorkerCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	for name, url := range remoteStores() {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			effects := filepath.Join(dir, "effects.log")
			s := newWorkerServer(t, url(t))
			wtok := s.token(t, "w", auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
			client := open(t, "", func(c *trellis.Config) { c.Store, c.Backend, c.Worker.Disabled = "", s.st, true })
			start := func() *testProcess {
				return startTestProcess(t, "TestRemoteCrashWorkerProcess", envRemoteCrashServer+"="+s.base,
					envRemoteCrashToken+"="+wtok, envCrashEffects+"="+effects)
			}
			wf := crashWorkflow(effects)
			worker := start()
			acked := make(chan string, remoteCrashRuns)
			var starting sync.WaitGroup
			starting.Go(func() { // starts runs while workers are killed
				defer close(acked)
				for i := range remoteCrashRuns {
					id, err := startRetrying(client, wf, i)
					if err != nil {
						t.Errorf("start %d: %v", i, err)
						return
					}
					acked <- id
					if i%10 == 0 {
						time.Sleep(20 * time.Millisecond)
					}
				}
			})
			for range 4 {
				// A kill strikes a worker with a run in flight: it waits until
				// the worker has executed a step (a worker process slow to
				// start on a loaded machine was killed before it claimed any).
				size := fileSize(effects)
				time.Sleep(time.Duration(300+rand.IntN(300)) * time.Millisecond)
				for deadline := time.Now().Add(30 * time.Second); fileSize(effects) == size && time.Now().Before(deadline); {
					time.Sleep(5 * time.Millisecond)
				}
				worker.kill(t)
				worker = start()
			}
			starting.Wait()
			var ids []string
			for id := range acked {
				ids = append(ids, id)
			}
			defer worker.kill(t)
			waitAllSucceeded(t, client, ids)
			verifyCrashRuns(t, client, ids, readEffects(t, effects))
			takenOver := 0
			for _, id := range ids {
				run, err := client.Get(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				if run.Attempts > 1 {
					takenOver++
				}
			}
			t.Logf("%d of %d runs were taken over from a killed worker", takenOver, len(ids))
			if takenOver == 0 {
				t.Error("no run was taken over: no kill struck a run in flight")
			}
		})
	}
}

// fileSize is the size of the file at path, 0 when it does not exist.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// Two servers on one Postgres, three remote workers spread over them and two
// clients starting runs through both: every run finishes, each step recorded
// once, whichever server a worker or a client talks to.
func TestRemoteWorkersTwoServersOnePostgres(t *testing.T) {
	url := pgtest.SchemaURL(t)
	s1 := newWorkerServer(t, url)
	s2 := newWorkerServer(t, url)
	wtok := s1.token(t, "w", auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
	ptok := s1.token(t, "p", auth.Grant{Role: auth.RoleProducer, Namespace: "default"}, auth.Grant{Role: auth.RoleReader, Namespace: "default"})
	effects := filepath.Join(t.TempDir(), "effects.log")
	wf := crashWorkflow(effects)
	for _, base := range []string{s1.base, s2.base, s1.base} {
		startRemoteWorker(t, base, wtok, wf)
	}
	var clients []*trellis.Client
	for _, base := range []string{s1.base, s2.base} {
		c, err := trellis.Open(context.Background(), trellis.Config{Server: base, Token: ptok})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	const runs = 100
	ids := make([]string, runs)
	var wg sync.WaitGroup
	for i := range runs {
		wg.Go(func() {
			h, err := trellis.Start(context.Background(), clients[i%2], wf, i)
			if err != nil {
				t.Error(err)
				return
			}
			ids[i] = h.RunID()
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	reader := open(t, "", func(c *trellis.Config) { c.Store, c.Backend, c.Worker.Disabled = "", s1.st, true })
	waitAllSucceeded(t, reader, ids)
	verifyCrashRuns(t, reader, ids, readEffects(t, effects))
	// No worker died, so runs are claimed once unless a lease expired under
	// load (then fencing refused the slow worker's writes: verified above).
	reclaimed := 0
	for _, id := range ids {
		run, err := reader.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if run.Attempts > 1 {
			reclaimed++
		}
	}
	t.Logf("%d of %d runs claimed again after a lease expired", reclaimed, runs)
}

// A workflow registered while the worker's claim stream is open is claimed at
// once: the stream, opened for the workflows known then, ends and the next
// one claims for all of them (it used to wait for the stream's 30 s).
func TestRemoteWorkerRegistersLater(t *testing.T) {
	s := newWorkerServer(t, sqliteURL(t))
	wtok := s.token(t, "w", auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
	ptok := s.token(t, "p", auth.Grant{Role: auth.RoleProducer, Namespace: "default"}, auth.Grant{Role: auth.RoleReader, Namespace: "default"})
	first := trellis.NewWorkflow("registered-first", func(wc *trellis.Context, in int) (int, error) { return in, nil })
	later := trellis.NewWorkflow("registered-later", func(wc *trellis.Context, in int) (int, error) { return in + 1, nil })
	w := startRemoteWorker(t, s.base, wtok, first)
	c, err := trellis.Open(context.Background(), trellis.Config{Server: s.base, Token: ptok})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctx, c, first, 1))
	if got, err := h.Result(ctx); err != nil || got != 1 {
		t.Fatalf("first workflow: %d, %v", got, err)
	}
	// The stream is open now, for "registered-first" only.
	if err := w.Register(ctx, later); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second) // under the stream's 30 s
	defer cancel()
	h = must[*trellis.Handle[int]](t)(trellis.Start(ctx, c, later, 1))
	if got, err := h.Result(ctx); err != nil || got != 2 {
		t.Fatalf("workflow registered later: %d, %v", got, err)
	}
}
