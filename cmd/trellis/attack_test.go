package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// The attacks of issue 35 played from outside against a real `trellis server`
// process, as an attacker holding ordinary tokens would: with curl-like HTTP
// requests (the worker protocol's Connect JSON form), never through the Go
// client. Each attack must be refused and change nothing, and the real
// worker's run must end as it would have without them.

// attackEnv is a server process on a fresh SQLite store, tokens made on the
// store, and a real remote worker of queue q2 running workflow "pay" (its
// step waits for release).
type attackEnv struct {
	t       *testing.T
	base    string
	tokens  map[string]string
	release chan struct{}
	started chan string // run IDs whose step began
	client  *trellis.Client
	pay     *trellis.Workflow[int, string]
}

// attackTokens are the grants of the tokens the attacks use: the victim's
// worker and producer of queue q2, an attacker who is a worker of queue q1
// only (the case), and one who is a worker and reader of the whole
// namespace (so it sees the victim's run and its times).
var attackTokens = map[string][]string{
	"victim":      {"worker:default:q2", "producer:default:q2", "reader:default:q2"},
	"attacker-q1": {"worker:default:q1"},
	"attacker-ns": {"worker:default", "reader:default"},
	"ops":         {"producer:default", "reader:default"},
}

func newAttackEnv(t *testing.T) *attackEnv {
	t.Helper()
	url := storeURL(t)
	trellisCmd(t, "migrate", "--store", url).ok(t)
	e := &attackEnv{t: t, tokens: map[string]string{}, release: make(chan struct{}), started: make(chan string, 10)}
	for name, grants := range attackTokens {
		args := []string{"tokens", "create", "--name", name, "--store", url}
		for _, g := range grants {
			args = append(args, "--grant", g)
		}
		e.tokens[name] = strings.TrimSpace(trellisCmd(t, args...).ok(t).stdout)
	}
	srv := startTrellisServer(t, "--store", url, "--listen", "127.0.0.1:0")
	e.base = srv.base()

	pay := trellis.NewWorkflow("pay", func(wc *trellis.Context, amount int) (string, error) {
		return trellis.Step(wc, "charge", func(ctx context.Context) (string, error) {
			e.started <- trellis.StepInfo(ctx).RunID
			select {
			case <-e.release:
				return fmt.Sprint("charged ", amount), nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		})
	}, trellis.WorkflowOptions{Queue: "q2"})
	cfg := trellis.Config{Server: e.base, Token: e.tokens["victim"]}
	cfg.Worker.Queues = []string{"q2"}
	w, err := trellis.NewWorker(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Client().Close() })
	if err := w.Register(context.Background(), pay); err != nil {
		t.Fatal(err)
	}
	c, err := trellis.Open(context.Background(), trellis.Config{Server: e.base, Token: e.tokens["victim"]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	e.client, e.pay = c, pay
	return e
}

// call sends a request with token's secret and returns the status and the
// decoded JSON answer (nil when it is not JSON).
func (e *attackEnv) call(method, path, token, ctype string, body []byte) (int, map[string]any) {
	e.t.Helper()
	req, err := http.NewRequest(method, e.base+path, bytes.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+e.tokens[token])
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return res.StatusCode, out
}

// rpc calls a unary worker procedure in Connect's JSON form, as curl would.
func (e *attackEnv) rpc(token, procedure string, msg any) (int, map[string]any) {
	e.t.Helper()
	b, err := json.Marshal(msg)
	if err != nil {
		e.t.Fatal(err)
	}
	return e.call("POST", "/trellis.worker.v1.WorkerService/"+procedure, token, "application/json", b)
}

// claim claims from queue q as token over the Claim stream (Connect's
// streaming JSON form: enveloped messages) and returns the claimed runs.
func (e *attackEnv) claim(token, q string) []map[string]any {
	e.t.Helper()
	msg, _ := json.Marshal(map[string]any{"namespace": "default", "queues": []string{q}, "workflows": []string{"lure"},
		"worker": "attacker", "credit": 1, "leaseDuration": "60s"})
	env := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	req, _ := http.NewRequest("POST", e.base+"/trellis.worker.v1.WorkerService/Claim", bytes.NewReader(append(env, msg...)))
	req.Header.Set("Authorization", "Bearer "+e.tokens[token])
	req.Header.Set("Content-Type", "application/connect+json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var runs []map[string]any
	for len(b) >= 5 {
		n := int(binary.BigEndian.Uint32(b[1:5]))
		var m struct {
			Runs []map[string]any `json:"runs"`
		}
		if b[0]&2 == 0 && json.Unmarshal(b[5:5+n], &m) == nil {
			runs = append(runs, m.Runs...)
		}
		b = b[5+n:]
	}
	return runs
}

// runJSON reads a run through the API as token.
func (e *attackEnv) runJSON(token, id string) map[string]any {
	e.t.Helper()
	status, run := e.call("GET", "/v1/namespaces/default/runs/"+id, token, "", nil)
	if status != 200 {
		e.t.Fatalf("GET run %s as %s: %d %v", id, token, status, run)
	}
	return run
}

func wantCode(t *testing.T, what string, status int, ans map[string]any, wantStatus int, wantCode string) {
	t.Helper()
	if status != wantStatus || ans["code"] != wantCode {
		t.Errorf("%s: %d %v, want %d %s", what, status, ans, wantStatus, wantCode)
	}
}

// The worker boundary: guessed and forged lease tokens, writes to another
// queue's lease, child runs started in another queue and a spoofed worker
// record are all refused, and the victim's run ends as its own worker made it.
func TestAttackWorkerBoundary(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server process")
	}
	e := newAttackEnv(t)
	h, err := trellis.Start(ctxT(t), e.client, e.pay, 42, trellis.StartOptions{ID: "pay-1"})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-e.started:
	case <-time.After(30 * time.Second):
		t.Fatal("the victim's step did not start")
	}

	// The attacker reads the run: its times give its lease token to the
	// microsecond (the token is the claim's time). 1,000 guesses around it,
	// the exact one among them, in one checkpoint batch: no secret matches.
	run := e.runJSON("attacker-ns", "pay-1")
	runID := run["id"].(string)
	at, err := time.Parse(time.RFC3339Nano, run["updated_at"].(string))
	if err != nil {
		t.Fatal(err)
	}
	forge := func(queue, secret string) []map[string]any {
		var items []map[string]any
		for d := int64(-500); d < 500; d++ {
			items = append(items, map[string]any{"lease": map[string]any{"namespace": "default", "runId": runID,
				"token": strconv.FormatInt(at.UnixMicro()+d, 10), "queue": queue, "secret": secret},
				"status": "succeeded", "output": "ImhhY2tlZCI="}) // "hacked"
		}
		return items
	}
	for _, secret := range []string{"", strings.Repeat("A", 43)} {
		status, ans := e.rpc("attacker-ns", "Checkpoint", map[string]any{"checkpoints": forge("q2", secret)})
		results, _ := ans["results"].([]any)
		if status != 200 || len(results) != 1000 {
			t.Fatalf("forged batch: %d %v", status, ans)
		}
		for i, r := range results {
			if r.(map[string]any)["error"].(map[string]any)["reason"] != "LEASE_LOST" {
				t.Fatalf("forged checkpoint %d: %v, want LEASE_LOST", i, r)
			}
		}
	}
	// The case: a worker of queue q1 writes a run of queue q2.
	status, ans := e.rpc("attacker-q1", "Checkpoint", map[string]any{"checkpoints": forge("q2", "")})
	wantCode(t, "q1 worker's checkpoint of q2's lease", status, ans, 403, "permission_denied")
	status, ans = e.rpc("attacker-q1", "Checkpoint", map[string]any{"checkpoints": forge("q1", "")})
	if status != 200 {
		t.Errorf("q1 worker's checkpoint relabeled q1: %d %v, want each lease lost", status, ans)
	}
	lease := map[string]any{"namespace": "default", "runId": runID, "token": strconv.FormatInt(at.UnixMicro(), 10), "queue": "q2"}
	status, ans = e.rpc("attacker-ns", "ExtendLeases", map[string]any{"leases": []any{lease}, "duration": "3600s"})
	if lost, _ := ans["lost"].([]any); status != 200 || len(lost) != 1 {
		t.Errorf("forged extension: %d %v, want the lease lost", status, ans)
	}
	status, ans = e.rpc("attacker-ns", "ReleaseLease", map[string]any{"lease": lease})
	wantCode(t, "forged release", status, ans, 409, "aborted")
	status, ans = e.rpc("attacker-q1", "ListHistory", map[string]any{"namespace": "default", "ref": runID})
	wantCode(t, "q1 worker's read of q2's history", status, ans, 403, "permission_denied")
	if r := e.runJSON("attacker-ns", "pay-1"); r["status"] != "running" || r["output"] != nil {
		t.Fatalf("run after the attacks: %v, want running, untouched", r)
	}

	// A worker of q1 starts a child run in q2 from its own q1 run.
	if status, ans := e.call("POST", "/v1/namespaces/default/runs", "ops", "application/json",
		[]byte(`{"workflow":"lure","id":"lure-1","queue":"q1"}`)); status != 201 {
		t.Fatalf("start of the lure: %d %v", status, ans)
	}
	claimed := e.claim("attacker-q1", "q1")
	if len(claimed) != 1 || claimed[0]["leaseSecret"] == "" {
		t.Fatalf("attacker's claim of q1: %v", claimed)
	}
	cr := claimed[0]
	own := map[string]any{"namespace": "default", "runId": cr["run"].(map[string]any)["id"], "token": cr["leaseToken"],
		"queue": "q1", "secret": cr["leaseSecret"]}
	child := map[string]any{"lease": own, "status": "waiting", "waitReason": "child",
		"ops":      []any{map[string]any{"position": "0", "kind": "child", "name": "c"}},
		"children": []any{map[string]any{"position": "0", "runs": []any{map[string]any{"id": "evil", "workflowId": "evil", "workflow": "pay", "queue": "q2"}}}}}
	status, ans = e.rpc("attacker-q1", "Checkpoint", map[string]any{"checkpoints": []any{child}})
	wantCode(t, "child run in q2 from a q1 worker", status, ans, 403, "permission_denied")
	if status, _ := e.call("GET", "/v1/namespaces/default/runs/evil", "ops", "", nil); status != 404 {
		t.Errorf("the refused child run: %d, want 404", status)
	}

	// The victim's worker record: replaced or removed by another principal.
	status, ans = e.call("GET", "/v1/namespaces/default/workers", "attacker-ns", "", nil)
	workers, _ := ans["workers"].([]any)
	if status != 200 || len(workers) != 1 {
		t.Fatalf("workers: %d %v", status, ans)
	}
	name := workers[0].(map[string]any)["name"].(string)
	for procedure, msg := range map[string]any{
		"Heartbeat":    map[string]any{"namespace": "default", "name": name, "workflows": []string{"fake"}, "ttl": "3600s", "start": true},
		"RemoveWorker": map[string]any{"namespace": "default", "name": name},
	} {
		status, ans := e.rpc("attacker-ns", procedure, msg)
		wantCode(t, procedure+" of the victim's worker record", status, ans, 403, "permission_denied")
	}
	_, ans = e.call("GET", "/v1/namespaces/default/workers", "attacker-ns", "", nil)
	if w := ans["workers"].([]any)[0].(map[string]any); w["name"] != name || fmt.Sprint(w["workflows"]) != "[pay]" || w["live"] != true {
		t.Errorf("the victim's record after the attacks: %v", w)
	}

	// The victim's worker ends its run as it would have.
	close(e.release)
	if out, err := h.Result(ctxT(t)); err != nil || out != "charged 42" {
		t.Fatalf("the victim's result: %q, %v", out, err)
	}
	status, ans = e.call("GET", "/v1/namespaces/default/runs/pay-1/history", "ops", "", nil)
	if ops, _ := ans["ops"].([]any); status != 200 || len(ops) != 1 {
		t.Errorf("history: %d %v, want the one step", status, ans)
	}
}

// Invalid input from outside: payloads with invalid UTF-8 or a name twice, in
// a start, an event or a worker's checkpoint, are refused and nothing of them
// is stored; every run's JSON stays parseable by a strict client.
func TestAttackInvalidPayloads(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server process")
	}
	e := newAttackEnv(t)
	for _, body := range []string{
		"{\"workflow\":\"lure\",\"id\":\"bad-1\",\"input\":\"\xff\"}",
		`{"workflow":"lure","id":"bad-2","input":{"a":1,"a":2}}`,
		`{"workflow":"lure","id":"bad-3","workflow":"pay"}`,
		`{"workflow":"lure","id":"bad-4","input":"\ud800"}`,
	} {
		status, ans := e.call("POST", "/v1/namespaces/default/runs", "ops", "application/json", []byte(body))
		wantCode(t, "start "+body, status, ans, 400, "invalid_argument")
	}
	status, ans := e.call("GET", "/v1/namespaces/default/runs", "ops", "", nil)
	if runs, _ := ans["runs"].([]any); status != 200 || len(runs) != 0 {
		t.Fatalf("runs after refused starts: %d %v", status, ans)
	}
	if status, ans := e.call("POST", "/v1/namespaces/default/runs", "ops", "application/json",
		[]byte(`{"workflow":"lure","id":"lure-1","queue":"q1"}`)); status != 201 {
		t.Fatalf("start: %d %v", status, ans)
	}
	status, ans = e.call("POST", "/v1/namespaces/default/runs/lure-1/events", "ops", "application/json",
		[]byte("{\"name\":\"go\",\"payload\":\"\xfe\"}"))
	wantCode(t, "an event with invalid UTF-8", status, ans, 400, "invalid_argument")

	// A worker writes invalid UTF-8 (bytes fields are base64 in Connect's
	// JSON: "Iv8i" is the JSON string "\xff").
	cr := e.claim("attacker-q1", "q1")
	if len(cr) != 1 {
		t.Fatalf("claim: %v", cr)
	}
	lease := map[string]any{"namespace": "default", "runId": cr[0]["run"].(map[string]any)["id"], "token": cr[0]["leaseToken"],
		"queue": "q1", "secret": cr[0]["leaseSecret"]}
	status, ans = e.rpc("attacker-q1", "Checkpoint", map[string]any{"checkpoints": []any{
		map[string]any{"lease": lease, "status": "succeeded", "output": "Iv8i"}}})
	results, _ := ans["results"].([]any)
	if status != 200 || len(results) != 1 || results[0].(map[string]any)["error"].(map[string]any)["reason"] != "INVALID_PARAMS" {
		t.Fatalf("checkpoint of an output with invalid UTF-8: %d %v, want INVALID_PARAMS", status, ans)
	}
	if r := e.runJSON("ops", "lure-1"); r["status"] != "running" || r["output"] != nil {
		t.Fatalf("run after the refused checkpoint: %v", r)
	}
}
