package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/internal/s3test"
	"github.com/trellis-dev/trellis/store/blobs"
	"github.com/trellis-dev/trellis/store/blobs/s3blobs"
)

// The Go worker process of TestLargePayloads (TestLargeWorkerProcess).
const (
	envLargeServer = "TRELLIS_TEST_LARGE_SERVER"
	envLargeToken  = "TRELLIS_TEST_LARGE_TOKEN"
)

// largeMax is the payload limit of TestLargePayloads' server and workers.
const largeMax = 64 << 20

// largeEcho is the workflow every language's worker serves in
// TestLargePayloads: one step that returns its input with "!" added, and the
// step's result as the output.
var largeEcho = trellis.NewWorkflow("large.echo", func(wc *trellis.Context, in string) (string, error) {
	return trellis.Step(wc, "grow", func(context.Context) (string, error) { return in + "!", nil })
})

// TestLargeWorkerProcess is the Go remote worker of TestLargePayloads, in a
// process of its own; it skips unless that test started it.
func TestLargeWorkerProcess(t *testing.T) {
	base := os.Getenv(envLargeServer)
	if base == "" {
		t.Skip("a worker process of TestLargePayloads")
	}
	go exitWithParent()
	cfg := trellis.Config{Server: base, Token: os.Getenv(envLargeToken), MaxPayloadBytes: largeMax}
	cfg.Worker.Name, cfg.Worker.Queues = "large-go", []string{"large-go"}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	w, err := trellis.NewWorker(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(ctx, largeEcho); err != nil {
		t.Fatal(err)
	}
	if err := w.Run(ctx); err != nil { // until SIGTERM
		t.Fatal(err)
	}
}

// largeWorkerPy and largeWorkerTS are the Python and TypeScript workers of
// TestLargePayloads.
const largeWorkerPy = `import os, sys
sys.path.insert(0, os.environ["SDK"])
import trellis

@trellis.workflow("large.echo")
async def echo(ctx, inp):
    return await ctx.step.run("grow", lambda: inp + "!")

# A lease of a minute: a call's answer is awaited a third of the lease, and a
# loaded machine took more than the default's 3.3 s over a 50 MiB checkpoint.
w = trellis.Worker(os.environ["TRELLIS_SERVER"], os.environ["TRELLIS_TOKEN"], queues=["large-py"], name="large-py",
                   max_payload_bytes=` + "64 << 20" + `, lease_seconds=60)
w.register(echo)
w.run()
`

const largeWorkerTS = `import { Worker, defineWorkflow } from '%s';
const echo = defineWorkflow('large.echo', async (ctx, inp) => ctx.step.run('grow', async () => inp + '!'));
// A lease of a minute, as the Python worker's: its calls wait up to the lease.
const w = new Worker({ server: process.env.TRELLIS_SERVER, token: process.env.TRELLIS_TOKEN, queues: ['large-ts'],
  name: 'large-ts', maxPayloadBytes: 64 << 20, leaseMs: 60_000 });
w.register([echo]);
await w.run();
`

// A run with a 50 MiB input and a 50 MiB result (2 MiB with -race), from
// outside: a `trellis server` process (--max-payload 64 MiB, payloads above
// the threshold in an S3-compatible object store), remote workers in Go, Python and (when its
// packages are installed) TypeScript, each a process of its own, and runs
// started and read through the HTTP API (plain HTTP, and the Go client).
// Deleting the runs leaves nothing in the bucket.
func TestLargePayloads(t *testing.T) {
	if testing.Short() {
		t.Skip("moves hundreds of megabytes")
	}
	t.Parallel() // a process test: beside the others (CI runs this package with -parallel 4)
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	s3 := s3test.Start(t)
	blobsURL := s3.URL("large", "t")
	url := storeURL(t)
	if os.Getenv("TRELLIS_TEST_STORE") == "postgres" {
		url = pgtest.SchemaURL(t)
	}
	trellisCmd(t, "migrate", "--store", url).ok(t)
	token := strings.TrimSpace(trellisCmd(t, "tokens", "create", "--name", "large", "--store", url, "--grant", "admin:*").ok(t).stdout)
	srv := startTrellisServer(t, "--store", url, "--listen", "127.0.0.1:0", "--access-log=false",
		"--max-payload", strconv.Itoa(largeMax), "--blobs", blobsURL)
	base := srv.base()
	api := &apiClient{t: t, base: base, token: token}

	langs := []string{"go", "py"}
	startLargeWorker(t, "go", exec.Command(os.Args[0], "-test.run=^TestLargeWorkerProcess$", "-test.count=1"), base, token)
	dir := t.TempDir()
	py := filepath.Join(dir, "worker.py")
	if err := os.WriteFile(py, []byte(largeWorkerPy), 0o600); err != nil {
		t.Fatal(err)
	}
	startLargeWorker(t, "py", exec.Command("python3", py), base, token, "SDK="+filepath.Join(root, "sdk/python"))
	if _, err := os.Stat(filepath.Join(root, "sdk/typescript/node_modules/@connectrpc/connect-node")); err == nil {
		ts := filepath.Join(dir, "worker.mjs")
		src := fmt.Sprintf(largeWorkerTS, filepath.Join(root, "sdk/typescript/src/index.js"))
		if err := os.WriteFile(ts, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		startLargeWorker(t, "ts", exec.Command("node", ts), base, token)
		langs = append(langs, "ts")
	} else {
		t.Log("no TypeScript worker: the SDK's packages are not installed (npm ci in sdk/typescript)")
	}
	for _, l := range langs {
		api.waitWorker("large-" + l)
	}

	size := 50 << 20
	if raceEnabled {
		// The race detector's server and workers take minutes over 50 MiB:
		// still above the threshold, and CI's run without it moves 50.
		size = 2 << 20
	}
	in := strings.Repeat("a", size)
	want := in + "!"
	var ids []string
	// Plain HTTP: a 50 MiB JSON body, and the result read back whole.
	for _, l := range langs {
		t0 := time.Now()
		body, _ := json.Marshal(map[string]any{"workflow": "large.echo", "queue": "large-" + l, "input": in})
		var run struct {
			ID string `json:"id"`
		}
		if code := largeDo(t, "POST", base+"/v1/namespaces/default/runs", token, body, &run); code != 201 {
			t.Fatalf("%s: start answered %d", l, code)
		}
		var res struct {
			Status string          `json:"status"`
			Input  json.RawMessage `json:"input"`
			Output json.RawMessage `json:"output"`
			Error  any             `json:"error"`
		}
		for deadline := time.Now().Add(5 * time.Minute); time.Now().Before(deadline); {
			// 202 when the wait is over first (a slow machine, -race): ask again
			if largeDo(t, "GET", base+"/v1/namespaces/default/runs/"+run.ID+"/result?wait=60s", token, nil, &res) == 200 {
				break
			}
		}
		var out, gotIn string
		_ = json.Unmarshal(res.Output, &out)
		_ = json.Unmarshal(res.Input, &gotIn)
		if res.Status != "succeeded" || out != want || gotIn != in {
			t.Fatalf("%s worker: %s, error %v, output %d bytes, input %d bytes; want succeeded with %d and %d",
				l, res.Status, res.Error, len(out), len(gotIn), len(want), len(in))
		}
		ids = append(ids, run.ID)
		t.Logf("%s worker: a %d MiB input and result in %v", l, size>>20, time.Since(t0).Round(time.Millisecond))
	}
	// The Go client over the API.
	c, err := trellis.Open(t.Context(), trellis.Config{Server: base, Token: token, MaxPayloadBytes: largeMax,
		Worker: trellis.WorkerOptions{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	h, err := trellis.Start(t.Context(), c, largeEcho, in, trellis.StartOptions{Queue: "large-" + langs[len(langs)-1]})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	got, err := h.Result(ctx)
	if err != nil || got != want {
		t.Fatalf("Go client: %d bytes, %v", len(got), err)
	}
	ids = append(ids, h.RunID())
	// A list does not carry them; the history does.
	var page struct {
		Runs []struct {
			Input json.RawMessage `json:"input"`
		} `json:"runs"`
	}
	api.get("/v1/namespaces/default/runs", &page)
	for _, r := range page.Runs {
		if len(r.Input) > 0 {
			t.Fatalf("the list carries a %d-byte input", len(r.Input))
		}
	}
	var hist struct {
		Ops []struct {
			Result json.RawMessage `json:"result"`
		} `json:"ops"`
	}
	api.get("/v1/namespaces/default/runs/"+ids[0]+"/history", &hist)
	if len(hist.Ops) != 1 || len(hist.Ops[0].Result) < len(want) {
		t.Fatalf("history: %d ops", len(hist.Ops))
	}

	// Everything is in the bucket, nothing stays after the runs are deleted.
	b, err := blobs.Open(t.Context(), blobsURL)
	if err != nil {
		t.Fatal(err)
	}
	count := func() int {
		n, err := b.(*s3blobs.Backend).Count(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if n := count(); n < 2*len(ids) {
		t.Fatalf("%d objects in the bucket for %d runs, want at least an input and an output each", n, len(ids))
	}
	for _, id := range ids {
		if code := largeDo(t, "DELETE", base+"/v1/namespaces/default/runs/"+id, token, nil, nil); code != 204 {
			t.Fatalf("delete %s answered %d", id, code)
		}
	}
	if n := count(); n != 0 {
		t.Fatalf("%d objects left in the bucket after deleting every run", n)
	}
}

func startLargeWorker(t *testing.T, lang string, cmd *exec.Cmd, base, token string, env ...string) {
	t.Helper()
	cmd.Env = append(append(os.Environ(), "TRELLIS_SERVER="+base, "TRELLIS_TOKEN="+token,
		envLargeServer+"="+base, envLargeToken+"="+token), env...)
	startWorkerGroup(t, lang, cmd)
}

// largeDo makes one API call with a body of any size and decodes the answer
// into out; it returns the status.
func largeDo(t *testing.T, method, url, token string, body []byte, out any) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{Timeout: 3 * time.Minute}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: %d %.500s", method, url, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
	}
	return resp.StatusCode
}
