package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/bench"
	"github.com/trellis-dev/trellis/internal/sqlitedrv"
	"github.com/trellis-dev/trellis/store"
)

// bench --server is a client of a real server: api-start's runs are in the
// server's store, each acknowledged; w3 runs its workflow in a remote worker.
func TestBenchThroughServer(t *testing.T) {
	defaultRemoteWorker := bench.StartRemoteWorker
	url := storeURL(t)
	trellisCmd(t, "migrate", "--store", url).ok(t)
	base, token, stop := startServer(t, url)
	defer stop()

	res := trellisCmd(t, "bench", "--server", base, "--token", token, "--workload", "api-start", "-n", "300", "--clients", "8", "--json").ok(t)
	var r bench.Result
	if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
		t.Fatalf("bench printed %q: %v", res.stdout, err)
	}
	if r.Workload != "api-start" || r.N != 300 || r.WorkflowsPerS <= 0 || r.Settings["clients"] != float64(8) || r.Settings["via"] != "server" {
		t.Fatalf("result %+v", r)
	}
	st, err := openTokenStore(ctxT(t), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	page, err := st.RunList(ctxT(t), &store.RunListParams{Namespace: bench.RemoteNamespace, Limit: 1000})
	if err != nil || len(page.Runs) != 300 {
		t.Fatalf("%d runs in the store, want 300 (%v)", len(page.Runs), err)
	}

	// w3 over HTTP needs a remote worker: without one the workload says so; by
	// default the bench runs one of the SDK, through the server's worker protocol.
	bench.StartRemoteWorker = nil
	res = trellisCmd(t, "bench", "--server", base, "--token", token, "--workload", "w3", "-n", "3")
	bench.StartRemoteWorker = defaultRemoteWorker
	if res.code != 1 || !strings.Contains(res.stderr, "needs a remote worker") {
		t.Fatalf("w3 without a remote worker: exit %d, stderr %q", res.code, res.stderr)
	}
	res = trellisCmd(t, "bench", "--server", base, "--token", token, "--workload", "w3", "-n", "3", "--json").ok(t)
	if err := json.Unmarshal([]byte(res.stdout), &r); err != nil || r.Workload != "w3" || r.N != 3 || r.P50Ms <= 0 {
		t.Fatalf("w3 printed %q (%v)", res.stdout, err)
	}

	// --no-worker: the bench starts none (its hook would fail the test); a worker
	// started outside it (here in this process, as an SDK's bench worker would in
	// its own) runs the workflows.
	stopOuter, err := defaultRemoteWorker(ctxT(t), bench.RemoteOptions{Server: base, Token: token, Concurrency: 8}, bench.Workflows())
	if err != nil {
		t.Fatal(err)
	}
	bench.StartRemoteWorker = func(context.Context, bench.RemoteOptions, []trellis.Registrable) (func() error, error) {
		t.Error("bench --no-worker started a remote worker")
		return nil, errors.New("no")
	}
	res = trellisCmd(t, "bench", "--server", base, "--token", token, "--workload", "w1", "-n", "5", "--no-worker", "--json").ok(t)
	bench.StartRemoteWorker = defaultRemoteWorker
	if err := json.Unmarshal([]byte(res.stdout), &r); err != nil || r.Workload != "w1" || r.N != 5 {
		t.Fatalf("w1 --no-worker printed %q (%v)", res.stdout, err)
	}
	if err := stopOuter(); err != nil {
		t.Fatal(err)
	}

	// w1 and w2 through the server: the Go client over HTTP starts and waits,
	// the remote worker runs every step; each run ended succeeded in the store.
	res = trellisCmd(t, "bench", "--server", base, "--token", token, "--workload", "w1,w2", "-n", "8", "--clients", "4", "--concurrency", "8", "--json").ok(t)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if len(lines) != 2 {
		t.Fatalf("w1,w2 printed %q", res.stdout)
	}
	for i, name := range []string{"w1", "w2"} {
		var r bench.Result
		if err := json.Unmarshal([]byte(lines[i]), &r); err != nil || r.Workload != name || r.N != 8 || r.P50Ms <= 0 || r.WorkflowsPerS <= 0 ||
			r.Settings["via"] != "server" || r.Settings["concurrency"] != float64(8) {
			t.Fatalf("%s printed %q (%v)", name, lines[i], err)
		}
		// w1's CPU per run: the bench process's, and the server's from its
		// GET /metrics (the admin token may read them).
		if name == "w1" && (r.CPUMsPerRun == nil || *r.CPUMsPerRun <= 0 || r.ServerCPUMsPerRun == nil || *r.ServerCPUMsPerRun < 0) {
			t.Fatalf("w1 printed %q: want cpu_ms_per_run and server_cpu_ms_per_run", lines[i])
		}
	}
	for wf, want := range map[string]int{"bench-3-steps": 5 + 8, "bench-20-steps": 8} { // w1 ran with --no-worker too
		page, err := st.RunList(ctxT(t), &store.RunListParams{Namespace: bench.RemoteNamespace, Workflow: wf, Limit: 1000})
		if err != nil || len(page.Runs) != want {
			t.Fatalf("%s: %d runs in the store, want %d (%v)", wf, len(page.Runs), want, err)
		}
		for _, r := range page.Runs {
			if r.Status != store.StatusSucceeded {
				t.Fatalf("%s run %s is %s", wf, r.ID, r.Status)
			}
		}
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "--server", base, "--workload", "w7"}, `unknown workload "w7" with --server`},
		{[]string{"bench", "--store", url, "--workload", "w1,w3", "--clients", "4"}, "--clients without --server bounds w1 only, not w3"},
		{[]string{"bench", "--store", url, "--workload", "w1", "--clients", "-1"}, "--clients must be positive"},
		{[]string{"bench", "--store", url, "--no-worker"}, "--no-worker needs --server"},
		{[]string{"bench", "--store", url, "--server", base}, "exclude each other"},
		{[]string{"bench", "--server", base, "--pprof", "0.0.0.0:6060"}, "only a loopback address"},
		{[]string{"bench", "--server", base, "--pprof", "6060"}, "--pprof"},
		{[]string{"server", "--store", url, "--pprof", "10.1.2.3:6060"}, "only a loopback address"},
	} {
		if res := trellisCmd(t, c.args...); res.code != 2 || !strings.Contains(res.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, res.code, res.stderr, c.want)
		}
	}
	if res := trellisCmd(t, "bench", "--server", base, "--token", "wrong", "-n", "5"); res.code != 1 || !strings.Contains(res.stderr, "401") {
		t.Errorf("wrong token: exit %d, stderr %q", res.code, res.stderr)
	}
}

// bench --observe runs a workload with metrics and tracing and says so in its
// settings, as it names the SQLite library of the build on SQLite; a --trace-ratio outside (0, 1] is refused before anything runs.
func TestBenchObserve(t *testing.T) {
	url := storeURL(t)
	res := trellisCmd(t, "bench", "--store", url, "--workload", "w1", "-n", "50", "--observe", "--trace-ratio", "0.5", "--json").ok(t)
	var r bench.Result
	if err := json.Unmarshal([]byte(res.stdout), &r); err != nil {
		t.Fatalf("bench printed %q: %v", res.stdout, err)
	}
	if r.N != 50 || r.Settings["observe"] != "metrics+tracing" || r.Settings["trace_ratio"] != 0.5 {
		t.Fatalf("result %+v", r)
	}
	if lib, ok := r.Settings["sqlite_library"]; strings.HasPrefix(url, "sqlite:") != ok || ok && lib != sqlitedrv.Library {
		t.Fatalf("settings %v: want sqlite_library %q on SQLite alone", r.Settings, sqlitedrv.Library)
	}
	for _, bad := range []string{"0", "1.5", "-1"} {
		res := trellisCmd(t, "bench", "--store", url, "--workload", "w1", "--observe", "--trace-ratio", bad)
		if res.code != 2 || !strings.Contains(res.stderr, "--trace-ratio must be in (0, 1]") {
			t.Errorf("--trace-ratio %s: exit %d, stderr %q", bad, res.code, res.stderr)
		}
	}
}

// bench --cpuprofile and --memprofile write pprof files (gzipped protobuf) of
// the run; a path that cannot be created fails before any workload runs.
func TestBenchProfiles(t *testing.T) {
	url := storeURL(t)
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.prof"), filepath.Join(dir, "mem.prof")
	res := trellisCmd(t, "bench", "--store", url, "--workload", "w5", "-n", "200", "--cpuprofile", cpu, "--memprofile", mem, "--json").ok(t)
	if !strings.Contains(res.stdout, `"workload":"w5"`) {
		t.Fatalf("bench printed %q", res.stdout)
	}
	for _, f := range []string{cpu, mem} {
		b, err := os.ReadFile(f)
		if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
			t.Errorf("%s: %d bytes, %v: not a pprof file", f, len(b), err)
		}
	}
	res = trellisCmd(t, "bench", "--store", url, "--workload", "w5", "-n", "200", "--memprofile", filepath.Join(dir, "none", "mem.prof"))
	if res.code == 0 || strings.Contains(res.stdout, "w5") {
		t.Errorf("--memprofile into a missing directory: exit %d, stdout %q", res.code, res.stdout)
	}
}

// The stream and UI workloads measure the server given by --server: s1 and s2
// run their emitting workflow in the bench's remote worker and read the
// server's SSE route, s3 holds idle streams open and reads the server's RSS
// from its /metrics, ui1 seeds namespace bench through the batch route (once,
// filling the holes a stopped seeding left) and loads the runs page signed in
// with the token. A wrong token and a token that may not read /metrics fail
// with the reason.
func TestBenchStreamsAndUIThroughServer(t *testing.T) {
	t.Parallel() // a process test: beside the others (CI runs this package with -parallel 4)
	url := storeURL(t)
	trellisCmd(t, "migrate", "--store", url).ok(t)
	base, token, stop := startServer(t, url)
	defer stop()

	res := trellisCmd(t, "bench", "--server", base, "--token", token, "--workload", "s1,s2,s3", "-n", "20", "--subscribers", "20", "--json").ok(t)
	lines := strings.Split(strings.TrimSpace(res.stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("s1,s2,s3 printed %q", res.stdout)
	}
	var rs [3]bench.Result
	for i, name := range []string{"s1", "s2", "s3"} {
		if err := json.Unmarshal([]byte(lines[i]), &rs[i]); err != nil || rs[i].Workload != name || rs[i].Settings["via"] != "server" || rs[i].Settings["server"] != base {
			t.Fatalf("%s printed %q (%v)", name, lines[i], err)
		}
	}
	if s1 := rs[0]; s1.N != 20 || !(s1.P50Ms > 0 && s1.P99Ms >= s1.P50Ms && s1.P50Ms < 1000) {
		t.Errorf("s1: %s", lines[0])
	}
	if s2 := rs[1]; s2.N != 20 || s2.Subscribers != 20 || s2.EventsPerS == nil || !(*s2.EventsPerS > 0) {
		t.Errorf("s2: %s", lines[1])
	}
	if s3 := rs[2]; s3.Subscribers != 20 || s3.RSSPerSubscriberKB == nil || s3.RSSIdleMB == nil || !(*s3.RSSIdleMB > 1) ||
		s3.Settings["server_stream_subscribers"].(float64) < 21 {
		t.Errorf("s3: %s", lines[2])
	}

	st, err := openTokenStore(ctxT(t), url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// The runs of s1 and s2 ran in the bench's remote worker and ended.
	page, err := st.RunList(ctxT(t), &store.RunListParams{Namespace: bench.RemoteNamespace, Workflow: "bench-emitter", Limit: 10})
	if err != nil || len(page.Runs) != 2 || page.Runs[0].Status != store.StatusSucceeded || page.Runs[1].Status != store.StatusSucceeded {
		t.Fatalf("the emitter's runs: %v (%v)", page.Runs, err)
	}

	ui1 := func(n int) bench.Result {
		t.Helper()
		res := trellisCmd(t, "bench", "--server", base, "--token", token, "--workload", "ui1", "-n", strconv.Itoa(n), "--json").ok(t)
		var r bench.Result
		if err := json.Unmarshal([]byte(res.stdout), &r); err != nil || r.Workload != "ui1" || r.N != n || !(r.P50Ms > 0) ||
			r.Settings["requests"] != float64(160) || r.Settings["runs_stored"] != float64(n) || r.Settings["status_filter"] != "pending" {
			t.Fatalf("ui1 -n %d printed %q (%v)", n, res.stdout, err)
		}
		return r
	}
	// 120 runs: the runs page (50 a page) has a next page.
	if r := ui1(120); r.Settings["seeded_now"] != true || r.Settings["runs_created"] != float64(120) {
		t.Fatalf("first ui1: %v", r.Settings)
	}
	if r := ui1(120); r.Settings["seeded_now"] != false || r.Settings["runs_created"] != float64(0) {
		t.Fatalf("ui1 again: %v", r.Settings)
	}
	// A seeding that stopped with batches in flight leaves holes after the
	// runs it made in order: a later one fills them.
	trellisCmd(t, "runs", "start", "ship", "--id", "ui1-000000150", "--queue", "ui1-default", "--input", "1",
		"--namespace", bench.RemoteNamespace, "--server", base, "--token", token).ok(t)
	if r := ui1(200); r.Settings["seeded_now"] != true || r.Settings["runs_created"] != float64(79) {
		t.Fatalf("ui1 over a hole: %v", r.Settings)
	}
	// A hole before runs that are all there (a batch cut off while a later
	// one committed) is filled too.
	for _, sub := range []string{"cancel", "delete"} {
		trellisCmd(t, "runs", sub, "ui1-000000010", "--namespace", bench.RemoteNamespace, "--server", base, "--token", token).ok(t)
	}
	if r := ui1(200); r.Settings["seeded_now"] != true || r.Settings["runs_created"] != float64(1) {
		t.Fatalf("ui1 over a hole before the last run: %v", r.Settings)
	}
	page, err = st.RunList(ctxT(t), &store.RunListParams{Namespace: bench.RemoteNamespace, Workflow: "checkout", Limit: 1000})
	if err != nil || len(page.Runs) != 50 {
		t.Fatalf("%d checkout runs, want 50 (%v)", len(page.Runs), err)
	}
	for _, r := range page.Runs {
		if r.Status != store.StatusPending || !strings.HasPrefix(r.WorkflowID, "ui1-") || !strings.HasPrefix(r.Queue, "ui1-") {
			t.Fatalf("seeded run %+v", r)
		}
	}

	// The --store form measures a server the bench starts itself, the same way.
	res = trellisCmd(t, "bench", "--store", storeURL(t), "--workload", "s1,s2", "-n", "10", "--subscribers", "5", "--json").ok(t)
	for i, line := range strings.Split(strings.TrimSpace(res.stdout), "\n") {
		var r bench.Result
		if err := json.Unmarshal([]byte(line), &r); err != nil || r.Workload != []string{"s1", "s2"}[i] || r.Settings["via"] != "in-process server" {
			t.Fatalf("--store s1,s2 printed %q (%v)", res.stdout, err)
		}
	}

	// Bad input: a wrong token, and a token that may not read /metrics.
	for _, w := range []string{"s1", "s2", "s3", "ui1"} {
		res := trellisCmd(t, "bench", "--server", base, "--token", "wrong", "--workload", w, "-n", "5")
		if res.code != 1 || !strings.Contains(res.stderr, "workload "+w+": the server refused the token (401: ") {
			t.Errorf("%s with a wrong token: exit %d, stderr %q", w, res.code, res.stderr)
		}
	}
	benchOnly := strings.TrimSpace(trellisCmd(t, "tokens", "create", "--name", "bench-only", "--grant", "producer:bench",
		"--grant", "reader:bench", "--grant", "worker:bench", "--store", url).ok(t).stdout)
	res = trellisCmd(t, "bench", "--server", base, "--token", benchOnly, "--workload", "s3", "--subscribers", "5")
	if res.code != 1 || !strings.Contains(res.stderr, "GET /metrics, which answered 403 Forbidden") || !strings.Contains(res.stderr, "reader:*") {
		t.Errorf("s3 with a token of namespace bench alone: exit %d, stderr %q", res.code, res.stderr)
	}
	if res := trellisCmd(t, "bench", "--server", base, "--token", token, "--workload", "s2", "--subscribers", "-1"); res.code != 2 ||
		!strings.Contains(res.stderr, "--subscribers must be positive") {
		t.Errorf("--subscribers -1: exit %d, stderr %q", res.code, res.stderr)
	}
}
