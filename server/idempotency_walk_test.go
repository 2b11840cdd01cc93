package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// walkFixture makes what one keyed route acts on, fresh for each call (i tells
// the calls apart), and returns the path and body (nil: none) of a request
// that succeeds once.
type walkFixture func(e *env, i int) (path string, body any)

// keyedFixtures has a fixture for every route that takes an Idempotency-Key,
// by operation: TestIdempotencyWalk fails for a mutating route without one.
var keyedFixtures = map[string]walkFixture{
	"startRun": func(e *env, i int) (string, any) { return runsPath, map[string]any{"workflow": "nobody-serves"} },
	"startRuns": func(e *env, i int) (string, any) {
		return runsPath + ":batch", map[string]any{"runs": []any{map[string]any{"workflow": "nobody-serves"}}}
	},
	"deleteRun": func(e *env, i int) (string, any) { return runsPath + "/" + e.finishedRun(), nil },
	"cancelRun": func(e *env, i int) (string, any) {
		return runsPath + "/" + e.start("nobody-serves", nil, nil).ID + "/cancel", nil
	},
	"resumeRun": func(e *env, i int) (string, any) { return runsPath + "/" + e.blockedRun(i) + "/resume", nil },
	"resetRun": func(e *env, i int) (string, any) {
		run := e.start("echo", map[string]any{"n": i}, nil)
		e.waitRun(run.ID)
		return runsPath + "/" + run.ID + "/reset", nil
	},
	"sendEvent": func(e *env, i int) (string, any) {
		return runsPath + "/" + e.start("nobody-serves", nil, nil).ID + "/events", map[string]any{"name": "go"}
	},
	"approve": func(e *env, i int) (string, any) {
		return e.approvalPath() + "/approve", map[string]any{"comment": "walk"}
	},
	"reject": func(e *env, i int) (string, any) {
		return e.approvalPath() + "/reject", map[string]any{"comment": "walk"}
	},
	"createNamespace": func(e *env, i int) (string, any) {
		return "/v1/namespaces", map[string]any{"name": fmt.Sprintf("walk-%d", i)}
	},
	"updateNamespace": func(e *env, i int) (string, any) {
		name := fmt.Sprintf("walk-ns-%d", i)
		if _, err := e.st.NamespaceCreate(context.Background(), &store.NamespaceCreateParams{Name: name}); err != nil {
			e.t.Fatal(err)
		}
		return "/v1/namespaces/" + name, map[string]any{"payload_limit": 1000}
	},
	"createQueue": func(e *env, i int) (string, any) {
		return "/v1/namespaces/default/queues", map[string]any{"name": fmt.Sprintf("wq-%d", i)}
	},
	"updateQueue": func(e *env, i int) (string, any) {
		return e.walkQueue(i, false), map[string]any{"concurrency_limit": 3}
	},
	"pauseQueue":     func(e *env, i int) (string, any) { return e.walkQueue(i, false) + "/pause", nil },
	"resumeQueue":    func(e *env, i int) (string, any) { return e.walkQueue(i, true) + "/resume", nil },
	"createSchedule": func(e *env, i int) (string, any) { return schedules, walkSchedule(i, false) },
	"updateSchedule": func(e *env, i int) (string, any) {
		return e.walkSchedule(i, false), map[string]any{"workflow": "echo", "cron": "@daily"}
	},
	"deleteSchedule":  func(e *env, i int) (string, any) { return e.walkSchedule(i, false), nil },
	"pauseSchedule":   func(e *env, i int) (string, any) { return e.walkSchedule(i, false) + "/pause", nil },
	"resumeSchedule":  func(e *env, i int) (string, any) { return e.walkSchedule(i, true) + "/resume", nil },
	"triggerSchedule": func(e *env, i int) (string, any) { return e.walkSchedule(i, false) + "/trigger", nil },
	"backfillSchedule": func(e *env, i int) (string, any) {
		return e.walkSchedule(i, false) + "/backfill", map[string]any{"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T03:00:00Z"}
	},
}

// The walk: every mutating route of the API honours an Idempotency-Key, or
// says why not (route.unkeyed, documented in docs/http-api.md). For each keyed
// route, concurrent duplicates execute once and all get the same answer; a
// retry gets it again, replayed; the key with another request (another
// principal, another body) is 422 idempotency_key_conflict.
func TestIdempotencyWalk(t *testing.T) {
	doc, err := os.ReadFile("../docs/http-api.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, rt := range routeTable {
		if rt.method != http.MethodGet && !rt.public && rt.unkeyed != "" && !strings.Contains(string(doc), "`"+rt.method+" "+rt.pattern+"`") {
			t.Errorf("%s %s ignores Idempotency-Key, but docs/http-api.md does not name it", rt.method, rt.pattern)
		}
	}
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newWalkEnv(t, url(t))
			for i, rt := range routeTable {
				if !rt.takesKey() {
					continue
				}
				fixture := keyedFixtures[rt.op]
				if fixture == nil {
					t.Errorf("%s %s takes an Idempotency-Key: give TestIdempotencyWalk a fixture for %s", rt.method, rt.pattern, rt.op)
					continue
				}
				path, body := fixture(e, i)
				e.walkKeyed(rt, path, body, "walk-"+rt.op)
			}
		})
	}
}

// walkKeyed checks one keyed route on path with body (see TestIdempotencyWalk).
func (e *env) walkKeyed(rt route, path string, body any, key string) {
	t := e.t
	t.Helper()
	raw := ""
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		raw = string(b)
	}
	const n = 4
	answers := make([]*resp, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			answers[i], errs[i] = e.send(rt.method, path, "admin", raw, IdempotencyKeyHeader, key)
		}()
	}
	wg.Wait()
	executed := 0
	for i, r := range answers {
		if errs[i] != nil {
			t.Fatalf("%s %s: %v", rt.method, path, errs[i])
		}
		if r.status != rt.status || string(r.body) != string(answers[0].body) {
			t.Errorf("%s %s: duplicate %d answered %d %s; duplicate 0 %d %s (want %d)", rt.method, path, i,
				r.status, r.body, answers[0].status, answers[0].body, rt.status)
			return
		}
		if r.header.Get(IdempotentReplayedHeader) != "true" {
			executed++
		}
	}
	if executed != 1 {
		t.Errorf("%s %s: %d of %d concurrent duplicates executed, want 1", rt.method, path, executed, n)
	}
	again, err := e.send(rt.method, path, "admin", raw, IdempotencyKeyHeader, key)
	if err != nil {
		t.Fatal(err)
	}
	if again.header.Get(IdempotentReplayedHeader) != "true" || again.status != answers[0].status || string(again.body) != string(answers[0].body) {
		t.Errorf("%s %s: retry answered %d %s (replayed %q), want the first answer replayed", rt.method, path,
			again.status, again.body, again.header.Get(IdempotentReplayedHeader))
	}
	others := map[string]string{"another principal": "admin2"}
	if raw != "" {
		others["another body"] = "admin"
	}
	for what, token := range others {
		b := raw
		if what == "another body" {
			b += " " // other bytes, the same meaning: the fingerprint tells them apart
		}
		r, err := e.send(rt.method, path, token, b, IdempotencyKeyHeader, key)
		if err != nil {
			t.Fatal(err)
		}
		if r.status != 422 || !strings.Contains(string(r.body), `"idempotency_key_conflict"`) {
			t.Errorf("%s %s with the key and %s: %d %s, want 422 idempotency_key_conflict", rt.method, path, what, r.status, r.body)
		}
	}
}

// newWalkEnv is newEnv with a second admin ("admin2", principal root2) and no
// scheduler (the walk's schedules must not fire), serving echo.
func newWalkEnv(t *testing.T, url string, mod ...func(*Config)) *env {
	toks := testTokens()
	toks["admin2"] = &auth.Principal{Name: "root2", Grants: []auth.Grant{{Role: auth.RoleAdmin, Namespace: "*"}}}
	e := newEnv(t, url, append([]func(*Config){func(c *Config) {
		c.Authenticator = toks
		c.Scheduler.Disabled = true
	}}, mod...)...)
	e.served("echo")
	return e
}

// finishedRun starts a run and cancels it, and returns its ID.
func (e *env) finishedRun() string {
	e.t.Helper()
	run := e.start("nobody-serves", nil, nil)
	e.do("POST", runsPath+"/"+run.ID+"/cancel", "producer", nil).want(e.t, 200)
	return run.ID
}

// blockedRun makes a run blocked (as on non-determinism) through the store, and
// returns its ID: a workflow of its own, which the test worker does not claim.
func (e *env) blockedRun(i int) string {
	e.t.Helper()
	ctx := context.Background()
	wf := fmt.Sprintf("walk-blocked-%d", i)
	id := fmt.Sprintf("blocked-%d", i)
	if _, err := e.st.RunCreate(ctx, &store.RunCreateParams{Namespace: "default", ID: id, WorkflowID: id, Workflow: wf, Queue: "default"}); err != nil {
		e.t.Fatal(err)
	}
	res, err := e.st.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "default", Workflows: []string{wf}, Worker: "walk",
		Max: 1, LeaseDuration: time.Minute})
	if err != nil || len(res.Runs) != 1 {
		e.t.Fatalf("claiming %s: %d runs, %v", id, len(res.Runs), err)
	}
	cr := res.Runs[0]
	_, err = e.st.Checkpoint(ctx, &store.CheckpointParams{
		Lease:  store.Lease{Namespace: "default", RunID: id, Token: cr.LeaseToken, RunSeq: cr.Run.Sequence},
		Status: store.StatusBlocked, WaitReason: "non_determinism",
		Error: &store.ErrorInfo{Message: "recorded step a, code asked for step b", Type: "non_determinism"}})
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

// approvalPath starts a run that asks anyone for an approval and returns the
// path of its pending request.
func (e *env) approvalPath() string {
	e.t.Helper()
	run := e.start("needs-anyone", nil, nil)
	return "/v1/namespaces/default/approvals/" + e.pendingApproval(run.ID)
}

// walkQueue creates queue wq-i of namespace default, paused or not, and
// returns its path.
func (e *env) walkQueue(i int, paused bool) string {
	e.t.Helper()
	name := fmt.Sprintf("wq-%d", i)
	if _, err := e.st.QueueCreate(context.Background(), &store.QueueCreateParams{Namespace: "default", Name: name, Paused: paused}); err != nil {
		e.t.Fatal(err)
	}
	return "/v1/namespaces/default/queues/" + name
}

func walkSchedule(i int, paused bool) map[string]any {
	return map[string]any{"name": fmt.Sprintf("ws-%d", i), "paused": paused, "spec": map[string]any{"workflow": "echo", "cron": "@hourly"}}
}

// walkSchedule creates schedule ws-i, paused or not, and returns its path.
func (e *env) walkSchedule(i int, paused bool) string {
	e.t.Helper()
	e.do("POST", schedules, "admin", walkSchedule(i, paused)).want(e.t, 201)
	return fmt.Sprintf("%s/ws-%d", schedules, i)
}
