package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	}
	for _, wf := range []string{"bench-3-steps", "bench-20-steps"} {
		page, err := st.RunList(ctxT(t), &store.RunListParams{Namespace: bench.RemoteNamespace, Workflow: wf, Limit: 1000})
		if err != nil || len(page.Runs) != 8 {
			t.Fatalf("%s: %d runs in the store, want 8 (%v)", wf, len(page.Runs), err)
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
		{[]string{"bench", "--store", url, "--clients", "4"}, "--clients needs --server"},
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
