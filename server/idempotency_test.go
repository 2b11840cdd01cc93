package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
)

const runsPath = "/v1/namespaces/default/runs"

// keyed sends a request with an Idempotency-Key.
func (e *env) keyed(method, path, token, key string, body any) *resp {
	e.t.Helper()
	return e.do(method, path, token, body, IdempotencyKeyHeader, key)
}

// replayed checks whether r is a replay.
func (r *resp) replayed(t *testing.T, want bool) *resp {
	t.Helper()
	if got := r.header.Get(IdempotentReplayedHeader) == "true"; got != want {
		t.Fatalf("replayed %v, want %v: %d %s", got, want, r.status, r.body)
	}
	return r
}

// same checks that r is a replay of first: same status and body.
func (r *resp) same(t *testing.T, first *resp) {
	t.Helper()
	r.replayed(t, true)
	if r.status != first.status || !bytes.Equal(r.body, first.body) {
		t.Fatalf("replay %d %s, first %d %s", r.status, r.body, first.status, first.body)
	}
}

// A start retried with its key gets the first answer and creates nothing more;
// the key with another request (body, principal) is a conflict that changes
// nothing; keys are per namespace.
func TestIdempotentStart(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, url(t))
			body := `{"workflow":"nobody-serves","input":{"n":1}}`
			first := e.keyed("POST", runsPath, "producer", "order-7", body).want(t, 201).replayed(t, false)
			e.keyed("POST", runsPath, "producer", "order-7", body).same(t, first)
			if n := e.runCount(); n != 1 {
				t.Fatalf("%d runs, want 1", n)
			}
			e.keyed("POST", runsPath, "producer", "order-7", `{"workflow":"nobody-serves","input":{"n":2}}`).
				problem(t, 422, "idempotency_key_conflict")
			e.keyed("POST", runsPath, "admin", "order-7", body).problem(t, 422, "idempotency_key_conflict") // another principal
			e.keyed("POST", runsPath+"/"+decodeRun(t, first).ID+"/cancel", "producer", "order-7", nil).
				problem(t, 422, "idempotency_key_conflict") // another route
			if n := e.runCount(); n != 1 {
				t.Fatalf("%d runs after conflicts, want 1", n)
			}
			e.keyed("POST", "/v1/namespaces/other/runs", "admin", "order-7", body).want(t, 201).replayed(t, false)
			e.keyed("GET", runsPath, "reader", "order-7", nil).want(t, 200).replayed(t, false) // reads ignore keys
			if n := e.runCount(); n != 1 {
				t.Fatalf("%d runs in default, want 1", n)
			}
		})
	}
}

func decodeRun(t *testing.T, r *resp) *trellis.Run {
	t.Helper()
	var run trellis.Run
	r.decode(t, &run)
	return &run
}

// A malformed key is refused and changes nothing; a call that fails records
// nothing, so its retry executes (and fails) again.
func TestIdempotencyKeyRefused(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	body := map[string]any{"workflow": "w"}
	for name, key := range map[string]string{"empty": "", "long": strings.Repeat("k", 256), "not ASCII": "clé"} {
		if r := e.keyed("POST", runsPath, "producer", key, body); r.status != 400 {
			t.Errorf("%s key: %d %s, want 400", name, r.status, r.body)
		}
	}
	twice, err := e.send("POST", runsPath, "producer", `{"workflow":"w"}`, IdempotencyKeyHeader, "a", IdempotencyKeyHeader, "b")
	if err != nil {
		t.Fatal(err)
	}
	twice.problem(t, 400, "invalid_argument")
	if n := e.runCount(); n != 0 {
		t.Fatalf("%d runs, want none", n)
	}
	e.keyed("POST", runsPath, "producer", "bad", `{"workflow":""}`).problem(t, 400, "invalid_argument")
	e.keyed("POST", runsPath, "producer", "bad", `{"workflow":"w"}`).want(t, 201).replayed(t, false)
	waiting := e.start("await-go", nil, nil)
	for range 2 {
		e.keyed("POST", runsPath+"/"+waiting.ID+"/resume", "producer", "resume-1", nil).problem(t, 409, "run_not_blocked")
	}
}

// send is e.do for other goroutines: it returns its error instead of failing
// the test, and sends every header pair (a name may repeat).
func (e *env) send(method, path, token, body string, hdr ...string) (*resp, error) {
	req, err := http.NewRequest(method, e.base+path, strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+token)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return &resp{status: res.StatusCode, header: res.Header, body: b}, err
}

// Of concurrent duplicates exactly one executes, and all get its answer.
func TestIdempotentConcurrentDuplicates(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, url(t))
			const n = 8
			var (
				wg       sync.WaitGroup
				replayed atomic.Int32
				answers  [n]*resp
				errs     [n]error
			)
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					answers[i], errs[i] = e.send("POST", runsPath, "producer", `{"workflow":"nobody-serves"}`, IdempotencyKeyHeader, "dup")
					if errs[i] == nil && answers[i].header.Get(IdempotentReplayedHeader) == "true" {
						replayed.Add(1)
					}
				}()
			}
			wg.Wait()
			for i, r := range answers {
				if errs[i] != nil {
					t.Fatal(errs[i])
				}
				if r.status != 201 || !bytes.Equal(r.body, answers[0].body) {
					t.Fatalf("answer %d: %d %s, answer 0: %d %s", i, r.status, r.body, answers[0].status, answers[0].body)
				}
			}
			if got := e.runCount(); got != 1 || replayed.Load() != n-1 {
				t.Fatalf("%d runs and %d replays, want 1 and %d", got, replayed.Load(), n-1)
			}
		})
	}
}

// Events, cancel, approve and reset replay their first answer, even when doing
// them again would now be refused.
func TestIdempotentActions(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, url(t))
			testIdempotentEvent(t, e)
			testIdempotentCancel(t, e)
			testIdempotentDecision(t, e)
		})
	}
}

func testIdempotentEvent(t *testing.T, e *env) {
	run := e.start("await-go", nil, nil)
	path := runsPath + "/" + run.ID + "/events"
	ev := map[string]any{"name": "go", "payload": "hi"}
	first := e.keyed("POST", path, "producer", "ev-1", ev).want(t, 204).replayed(t, false)
	e.keyed("POST", path, "producer", "ev-1", ev).same(t, first)
	done := e.waitRun(run.ID)
	if string(done.Output) != `"hi"` {
		t.Fatalf("output %s", done.Output)
	}
	e.keyed("POST", path, "producer", "ev-1", ev).same(t, first) // the run ended: a new send is refused
	e.keyed("POST", path, "producer", "ev-1", map[string]any{"name": "go", "payload": "ho"}).problem(t, 422, "idempotency_key_conflict")
	e.do("POST", path, "producer", ev).problem(t, 409, "run_finished")

	before := e.runCount()
	reset := e.keyed("POST", runsPath+"/"+run.ID+"/reset", "producer", "reset-1", nil).want(t, 201).replayed(t, false)
	e.keyed("POST", runsPath+"/"+run.ID+"/reset", "producer", "reset-1", nil).same(t, reset)
	if n := e.runCount(); n != before+1 {
		t.Fatalf("%d runs after a reset and its retry, want %d", n, before+1)
	}
	again := decodeRun(t, reset)
	if again.ID == run.ID || again.WorkflowID != run.WorkflowID {
		t.Fatalf("reset run %+v of %+v", again, run)
	}
	// The new run waits for its event again: one with the first event's key is a
	// conflict (another run's path); with a key of its own it is delivered.
	e.keyed("POST", runsPath+"/"+again.ID+"/events", "producer", "ev-1", ev).problem(t, 422, "idempotency_key_conflict")
	e.keyed("POST", runsPath+"/"+again.ID+"/events", "producer", "ev-2", ev).want(t, 204).replayed(t, false)
	e.waitRun(again.ID) // ended before the worker stops
}

func testIdempotentCancel(t *testing.T, e *env) {
	run := e.start("nobody-serves", nil, nil)
	path := runsPath + "/" + run.ID + "/cancel"
	first := e.keyed("POST", path, "producer", "cancel-1", nil).want(t, 200).replayed(t, false)
	if got := decodeRun(t, first); got.ID != run.ID || got.Status != trellis.StatusCancelled {
		t.Fatalf("cancelled %+v", got)
	}
	e.keyed("POST", path, "producer", "cancel-1", nil).same(t, first)
	e.do("POST", path, "producer", nil).problem(t, 409, "run_finished")
}

func testIdempotentDecision(t *testing.T, e *env) {
	run := e.start("needs-anyone", nil, nil)
	path := "/v1/namespaces/default/approvals/" + e.pendingApproval(run.ID)
	first := e.keyed("POST", path+"/approve", "approver", "ok-1", map[string]any{"comment": "fine"}).want(t, 200).replayed(t, false)
	e.keyed("POST", path+"/approve", "approver", "ok-1", map[string]any{"comment": "fine"}).same(t, first)
	e.keyed("POST", path+"/reject", "approver", "ok-1", map[string]any{"comment": "fine"}).problem(t, 422, "idempotency_key_conflict")
	e.do("POST", path+"/approve", "approver", nil).problem(t, 409, "approval_decided")
	var a trellis.ApprovalRecord
	first.decode(t, &a)
	if a.Status != trellis.ApprovalApproved || a.Principal != "approver" || a.Comment != "fine" {
		t.Fatalf("decision %+v", a)
	}
	if done := e.waitRun(run.ID); string(done.Output) != `"approver"` {
		t.Fatalf("approved run: %s %s", done.Status, done.Output)
	}
}

// The server purges expired keys in the background: a key 24 hours old is gone
// from the store, and a request with it executes again.
func TestIdempotencyPurge(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			var offset atomic.Int64 // the store's clock runs ahead by this much
			clock := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
			st, err := trellis.OpenStore(context.Background(), url(t), clock)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { st.Close() }) // after the server's shutdown
			passes := make(chan int, 100)
			e := newServerOn(t, st, func(c *Config) {
				c.IdempotencyPurgeInterval = 10 * time.Millisecond
				c.purged = func(n int, err error) {
					if err == nil {
						passes <- n
					}
				}
			})
			body := `{"workflow":"nobody-serves"}`
			e.keyed("POST", runsPath, "producer", "old", body).want(t, 201)
			e.keyed("POST", runsPath, "producer", "old", body).want(t, 201).replayed(t, true)
			offset.Store(int64(store.IdempotencyTTL + time.Hour))
			for n := range passes {
				if n == 1 {
					break
				}
			}
			if n, err := st.IdempotencyPurge(context.Background(), &store.IdempotencyPurgeParams{}); err != nil || n != 0 {
				t.Fatalf("purge after the server's: %d, %v; want 0", n, err)
			}
			e.keyed("POST", runsPath, "producer", "old", body).want(t, 201).replayed(t, false)
			if n := e.runCount(); n != 2 {
				t.Fatalf("%d runs, want 2", n)
			}
		})
	}
}

// newServerOn is a listening server on st, without a worker.
func newServerOn(t *testing.T, st store.Store, mod func(*Config)) *env {
	t.Helper()
	cfg := Config{Backend: st, Listen: "127.0.0.1:0", Authenticator: testTokens()}
	mod(&cfg)
	srv, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := srv.Shutdown(context.Background()); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	})
	return &env{t: t, base: "http://" + srv.Addr().String(), srv: srv, st: st}
}

// A key is accepted exactly when it is 1 to 255 printable ASCII characters, and
// a refusal is invalid_argument. (`go test -fuzz FuzzIdempotencyKey ./server`.)
func FuzzIdempotencyKey(f *testing.F) {
	for _, s := range []string{"k", "", "clé", "a b", "\x7f", strings.Repeat("x", 255), strings.Repeat("x", 256)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		got, err := idempotencyKey(http.Header{IdempotencyKeyHeader: {key}})
		valid := len(key) >= 1 && len(key) <= 255 && !strings.ContainsFunc(key, func(r rune) bool { return r < 0x20 || r > 0x7e })
		switch {
		case valid && (err != nil || got != key):
			t.Fatalf("%q refused: %v", key, err)
		case !valid && !errors.Is(err, ErrInvalidArgument):
			t.Fatalf("%q: error %v, want invalid_argument", key, err)
		}
	})
}

// The OpenAPI document offers the Idempotency-Key header on every route that
// takes one (every mutating route but the token routes) and on nothing else.
func TestOpenAPIIdempotencyKey(t *testing.T) {
	for _, rt := range routeTable {
		op := OpenAPI()["paths"].(map[string]any)[rt.pattern].(map[string]any)[strings.ToLower(rt.method)].(map[string]any)
		params, _ := op["parameters"].([]any)
		has := slices.ContainsFunc(params, func(p any) bool { return p.(map[string]any)["name"] == IdempotencyKeyHeader })
		if want := rt.method != "GET" && !rt.public && !strings.HasPrefix(rt.pattern, "/v1/tokens"); has != want {
			t.Errorf("%s %s: Idempotency-Key parameter %v, want %v", rt.method, rt.pattern, has, want)
		}
	}
}
