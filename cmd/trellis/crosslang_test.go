package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// envCrossLanguage set to 1 makes TestCrossLanguage fail, not skip, when the
// TypeScript SDK's packages (npm ci in sdk/typescript), node or python3 are
// missing: .ci/run sets it once it installed them.
const envCrossLanguage = "TRELLIS_CROSS_LANGUAGE"

// One system, many languages: one trellis server, and the conformance kit's
// workers in Go, TypeScript and Python (real processes), each serving a queue
// of its own. A Go workflow starts a TypeScript child, a Python workflow a Go
// one, a TypeScript workflow a Python one; the same workflow run by each
// language leaves the same history, the same stream and the same metrics.
func TestCrossLanguage(t *testing.T) {
	if testing.Short() {
		t.Skip("starts workers in three languages")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	node, nodeErr := exec.LookPath("node")
	python, pyErr := exec.LookPath("python3")
	_, modErr := os.Stat(filepath.Join(root, "sdk/typescript/node_modules/@connectrpc/connect-node"))
	if err := cmp(nodeErr, pyErr, modErr); err != nil {
		if os.Getenv(envCrossLanguage) == "1" {
			t.Fatalf("%s=1 but: %v", envCrossLanguage, err)
		}
		t.Skipf("needs node, python3 and the TypeScript SDK's packages (npm ci in sdk/typescript): %v", err)
	}
	url := storeURL(t)
	trellisCmd(t, "migrate", "--store", url).ok(t)
	token := strings.TrimSpace(trellisCmd(t, "tokens", "create", "--name", "xl", "--store", url, "--grant", "admin:*").ok(t).stdout)
	srv := startTrellisServer(t, "--store", url, "--listen", "127.0.0.1:0", "--access-log=false")
	base := srv.base()
	workers := map[string][]string{
		"go":     {buildGoWorker(t)},
		"ts":     {node, filepath.Join(root, "sdk/typescript/conformance/worker.mjs")},
		"python": {python, filepath.Join(root, "sdk/python/conformance_worker.py")},
	}
	langs := []string{"go", "ts", "python"}
	for _, lang := range langs {
		startKitWorker(t, base, token, lang, workers[lang])
	}
	api := &apiClient{t: t, base: base, token: token}
	for _, lang := range langs {
		api.waitWorker("xl-" + lang)
	}

	// Children across languages: the child runs in the other language's queue,
	// which only that language's worker serves.
	for _, c := range []struct{ parent, child string }{{"go", "ts"}, {"python", "go"}, {"ts", "python"}} {
		id := api.start("conformance.child", "xl-"+c.parent, map[string]any{"n": 21, "queue": "xl-" + c.child})
		run := api.result(id)
		if run["status"] != "succeeded" || run["output"] != float64(42) {
			t.Fatalf("%s parent of a %s child: %v", c.parent, c.child, run)
		}
		var kids struct {
			Runs []map[string]any `json:"runs"`
		}
		api.get("/v1/namespaces/default/runs/"+id+"/children?position=0", &kids)
		if len(kids.Runs) != 1 || kids.Runs[0]["queue"] != "xl-"+c.child || kids.Runs[0]["status"] != "succeeded" || kids.Runs[0]["parent_id"] != id {
			t.Fatalf("%s parent's child: %v, want succeeded in xl-%s", c.parent, kids.Runs, c.child)
		}
	}

	// The same workflow in each language: the same history (kinds, names,
	// results, attempts), the same stream (event names and data fields), and
	// the same counts in the server's metrics.
	var histories, streams []string
	for _, lang := range langs {
		before := api.metrics()
		id := api.start("conformance.three_steps", "xl-"+lang, map[string]any{"x": 2})
		if run := api.result(id); run["status"] != "succeeded" || run["output"] != "result=30" {
			t.Fatalf("%s three_steps: %v", lang, run)
		}
		var h struct {
			Ops []map[string]any `json:"ops"`
		}
		api.get("/v1/namespaces/default/runs/"+id+"/history", &h)
		var shape []string
		for _, op := range h.Ops {
			shape = append(shape, fmt.Sprintf("%v %v %v %v done=%v attempts=%v", op["position"], op["kind"], op["name"], op["result"], op["done"], op["attempts"]))
		}
		histories = append(histories, strings.Join(shape, "; "))
		streams = append(streams, api.streamShape(id))
		after := api.metrics()
		for _, m := range []string{
			`trellis_step_attempts_total{outcome="ok",workflow="conformance.three_steps"}`,
			`trellis_run_attempts_total{status="succeeded",workflow="conformance.three_steps"}`,
			`trellis_runs_ended_total{status="succeeded",workflow="conformance.three_steps"}`,
		} {
			want := map[bool]float64{true: 3, false: 1}[strings.HasPrefix(m, "trellis_step")]
			if d := after[m] - before[m]; d != want {
				t.Errorf("%s: %s grew by %v, want %v", lang, m, d, want)
			}
		}
	}
	for i, lang := range langs[1:] {
		if histories[i+1] != histories[0] {
			t.Errorf("history of %s:\n%s\nof go:\n%s", lang, histories[i+1], histories[0])
		}
		if streams[i+1] != streams[0] {
			t.Errorf("stream of %s:\n%s\nof go:\n%s", lang, streams[i+1], streams[0])
		}
	}
	t.Logf("history: %s\nstream: %s", histories[0], streams[0])
}

func cmp(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// startKitWorker starts a conformance kit worker (docs/conformance.md: its
// environment) serving queue xl-LANG, in a process group of its own, and
// stops it with SIGTERM at cleanup.
func startKitWorker(t *testing.T, base, token, lang string, argv []string) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), "TRELLIS_SERVER="+base, "TRELLIS_TOKEN="+token, "TRELLIS_NAMESPACE=default",
		"TRELLIS_QUEUE=xl-"+lang, "TRELLIS_WORKER_NAME=xl-"+lang, "TRELLIS_LEASE_SECONDS=5")
	startWorkerGroup(t, lang, cmd)
}

// startWorkerGroup starts an SDK worker's command in a process group of its
// own, stops the group with SIGTERM at cleanup (SIGKILL 15 s later), and logs
// the worker's output when the test failed.
func startWorkerGroup(t *testing.T, lang string, cmd *exec.Cmd) {
	t.Helper()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("the %s worker's output:\n%s", lang, out.String())
		}
	})
}

// apiClient calls the server's HTTP API with a token.
type apiClient struct {
	t           *testing.T
	base, token string
}

func (a *apiClient) do(method, path string, body any, out any) int {
	a.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, a.base+path, r)
	if err != nil {
		a.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+a.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		a.t.Fatalf("%s %s: %d %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			a.t.Fatalf("%s %s: %v: %s", method, path, err, b)
		}
	}
	return resp.StatusCode
}

func (a *apiClient) get(path string, out any) { a.do("GET", path, nil, out) }

func (a *apiClient) start(workflow, queue string, input any) string {
	var run map[string]any
	a.do("POST", "/v1/namespaces/default/runs", map[string]any{"workflow": workflow, "queue": queue, "input": input}, &run)
	return run["id"].(string)
}

// result waits for run id to end (at most 60 s) and returns it.
func (a *apiClient) result(id string) map[string]any {
	a.t.Helper()
	for range 3 {
		var run map[string]any
		if a.do("GET", "/v1/namespaces/default/runs/"+id+"/result?wait=20s", nil, &run) == 200 {
			return run
		}
	}
	a.t.Fatalf("run %s did not end in 60 s", id)
	return nil
}

// waitWorker waits for a live worker record named name.
func (a *apiClient) waitWorker(name string) {
	a.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var ws struct {
			Workers []map[string]any `json:"workers"`
		}
		a.get("/v1/namespaces/default/workers", &ws)
		if slices.ContainsFunc(ws.Workers, func(w map[string]any) bool { return w["name"] == name && w["live"] == true }) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	a.t.Fatalf("no live worker %s after 60 s", name)
}

// streamShape reads run id's stream (which ends with its final event) and
// returns its events' names, each with its data's fields.
func (a *apiClient) streamShape(id string) string {
	a.t.Helper()
	req, _ := http.NewRequest("GET", a.base+"/v1/namespaces/default/runs/"+id+"/stream?after=0", nil)
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	var events []string
	name := ""
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			var data map[string]any
			_ = json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &data)
			var keys []string
			for k := range data {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			events = append(events, name+"{"+strings.Join(keys, ",")+"}")
		}
	}
	return strings.Join(events, " ")
}

var metricLine = regexp.MustCompile(`^(trellis_[a-z_]+\{[^}]*\}) ([0-9.e+]+)$`)

// metrics reads the server's counters of the kit's workflows.
func (a *apiClient) metrics() map[string]float64 {
	a.t.Helper()
	req, _ := http.NewRequest("GET", a.base+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+a.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		a.t.Fatal(err)
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if g := metricLine.FindStringSubmatch(sc.Text()); g != nil && strings.Contains(g[1], "conformance.") {
			m[g[1]], _ = strconv.ParseFloat(g[2], 64)
		}
	}
	return m
}
