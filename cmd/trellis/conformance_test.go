package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/conformance"
	"github.com/trellis-dev/trellis/internal/pgtest"
)

// The conformance kit with the Go SDK's kit worker, all real processes: a
// trellis server on the store, `trellis conformance` as the runner (this test
// binary re-executed as trellis), and conformance/goworker built from source,
// which the runner starts, SIGKILLs and starts again. Every case passes, on
// SQLite and on Postgres.
func TestConformanceKit(t *testing.T) {
	if testing.Short() {
		t.Skip("the conformance kit takes about 15 s")
	}
	t.Parallel() // a process test: beside the others (CI runs this package with -parallel 4)
	worker := buildGoWorker(t)
	kit, err := conformance.Load()
	if err != nil {
		t.Fatal(err)
	}
	for name, url := range map[string]func(t *testing.T) string{
		"sqlite":   storeURL,
		"postgres": func(t *testing.T) string { return pgtest.SchemaURL(t) },
	} {
		t.Run(name, func(t *testing.T) {
			base, token, _ := conformanceServer(t, url(t))
			began := time.Now()
			r := trellisProcess(t, "conformance", "--server", base, "--token", token, "--worker-cmd", worker)
			t.Logf("%s in %s:\n%s%s", name, time.Since(began).Round(time.Millisecond), r.stdout, r.stderr)
			if r.code != 0 {
				t.Fatalf("exit %d", r.code)
			}
			for _, c := range kit.Cases {
				contains(t, "the output", r.stdout, "PASS  "+c.Name+" ")
			}
			contains(t, "the output", r.stdout, "PASS: 18 of 18 cases", "stopped on SIGTERM")
		})
	}
}

// The runner's own failures, each with its exit status and what it says.
func TestConformanceRunnerFailures(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	t.Parallel() // a process test: beside the others (CI runs this package with -parallel 4)
	worker := buildGoWorker(t)
	base, token, readerOnly := conformanceServer(t, storeURL(t))

	t.Run("worker exits at once", func(t *testing.T) {
		began := time.Now()
		r := trellisProcess(t, "conformance", "--server", base, "--token", token, "--worker-cmd", "echo no worker here >&2; exit 3")
		if r.code != 1 {
			t.Fatalf("exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
		}
		contains(t, "stderr", r.stderr, "the worker command exited (exit status 3) before its worker record", "its output is in")
		if d := time.Since(began); d > 10*time.Second {
			t.Errorf("took %s to see the worker exit", d)
		}
		// The log it names holds what the command wrote.
		path := r.stderr[strings.Index(r.stderr, "its output is in ")+len("its output is in "):]
		b, err := os.ReadFile(strings.TrimSpace(path))
		if err != nil || !strings.Contains(string(b), "no worker here") {
			t.Errorf("the worker's log %q: %q, %v", path, b, err)
		}
	})

	t.Run("worker dies during the kit", func(t *testing.T) {
		// The worker SIGKILLs itself in the sleep's step, two seconds in (a
		// kill after a fixed second came before the worker was up on a loaded
		// machine, and both cases failed).
		r := trellisProcess(t, "conformance", "--server", base, "--token", token, "--only", "three_steps,sleep",
			"--worker-cmd", "CONFORMANCE_DIE_IN_SLEEP=1 exec "+worker)
		if r.code != 1 {
			t.Fatalf("exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
		}
		contains(t, "stdout", r.stdout, "PASS  conformance.three_steps", "FAIL  conformance.sleep",
			"the worker command exited on its own", "FAIL: 1 of 2 cases failed")
	})

	t.Run("token without the roles", func(t *testing.T) {
		r := trellisProcess(t, "conformance", "--server", base, "--token", readerOnly, "--worker-cmd", worker)
		if r.code != 1 {
			t.Fatalf("exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
		}
		contains(t, "stderr", r.stderr, "the token lacks", "producer", "approver", "worker")
		if strings.Contains(r.stderr, "reader (") {
			t.Errorf("reader named missing: %s", r.stderr)
		}
		if strings.Contains(r.stdout, "PASS") || strings.Contains(r.stdout, "worker output") {
			t.Errorf("the runner went on: %s", r.stdout)
		}
	})

	t.Run("a case gets a wrong output", func(t *testing.T) {
		r := trellisProcess(t, "conformance", "--server", base, "--token", token, "--only", "three_steps,conformance.kv",
			"--worker-cmd", "CONFORMANCE_BREAK=conformance.three_steps exec "+worker)
		if r.code != 1 {
			t.Fatalf("exit %d, want 1\n%s%s", r.code, r.stdout, r.stderr)
		}
		contains(t, "stdout", r.stdout, "FAIL  conformance.three_steps", `output {"broken_on_purpose":true}, want "result=30"`,
			"PASS  conformance.kv", "FAIL: 1 of 2 cases failed")
		contains(t, "stderr", r.stderr, "conformance: 1 of 2 cases failed")
	})

	t.Run("usage", func(t *testing.T) {
		for _, args := range [][]string{
			{"--server", base, "--token", token},
			{"--server", base, "--token", token, "--worker-cmd", worker, "--only", "nosuch"},
			{"--server", "ftp://x", "--token", token, "--worker-cmd", worker},
		} {
			r := trellisCmd(t, append([]string{"conformance"}, args...)...)
			if r.code != 2 {
				t.Errorf("%q: exit %d, want 2\n%s", args, r.code, r.stderr)
			}
		}
		contains(t, "help", trellisCmd(t, "help", "conformance").ok(t).stdout, "--worker-cmd", "TRELLIS_LEASE_SECONDS")
	})
}

// conformanceServer starts a trellis server on a new store at url and returns
// its URL, a token with the kit's four roles on namespace default and one with
// the reader role only.
func conformanceServer(t *testing.T, url string) (base, token, readerOnly string) {
	t.Helper()
	trellisCmd(t, "migrate", "--store", url).ok(t)
	token = strings.TrimSpace(trellisCmd(t, "tokens", "create", "--name", "kit", "--store", url, "--grant", "worker:default",
		"--grant", "producer:default", "--grant", "reader:default", "--grant", "approver:default").ok(t).stdout)
	readerOnly = strings.TrimSpace(trellisCmd(t, "tokens", "create", "--name", "reader-only", "--store", url,
		"--grant", "reader:default").ok(t).stdout)
	srv := startTrellisServer(t, "--store", url, "--listen", "127.0.0.1:0", "--access-log=false")
	return srv.base(), token, readerOnly
}

// trellisProcess runs `trellis ARGS...` as a process of its own (this test
// binary re-executed) and returns what it printed and its exit status.
func trellisProcess(t *testing.T, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
	// TMPDIR: the runner's worker log goes to the test's directory.
	cmd.Env = append(os.Environ(), mainArgsEnv+"="+strings.Join(args, "\n"), "TMPDIR="+t.TempDir())
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if _, exited := err.(*exec.ExitError); err != nil && !exited {
		t.Fatal(err)
	}
	return result{stdout: out.String(), stderr: errOut.String(), code: cmd.ProcessState.ExitCode()}
}

// buildGoWorker builds conformance/goworker into the test's directory.
func buildGoWorker(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go") // go test puts its GOROOT's bin first in PATH
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "goworker")
	out, err := exec.Command(goBin, "build", "-o", path, "github.com/trellis-dev/trellis/conformance/goworker").CombinedOutput()
	if err != nil {
		t.Fatalf("building the Go kit worker: %v\n%s", err, out)
	}
	return path
}
