package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/httpc"
	"github.com/trellis-dev/trellis/internal/problem"
)

// Each class of error exits with its own status, from the real binary (a
// process of its own): the line it prints on stderr, and under --json the
// problem document that stands for it.
func TestExitCodes(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts processes")
	}
	s := seed(t)
	base, admin, stop := startServer(t, s.url)
	t.Cleanup(stop) // after the parallel subtests
	reader := strings.TrimSpace(trellisCmd(t, "tokens", "create", "--name", "r", "--grant", "reader:default", "--store", s.url).ok(t).stdout)
	trellisCmd(t, "runs", "start", "ok", "--input", "1", "--id", "to-cancel", "--store", s.url).ok(t) // no worker: pending
	trellisCmd(t, "runs", "cancel", "to-cancel", "--store", s.url).ok(t)

	cases := []struct {
		name   string
		args   []string
		code   int
		stderr string // the line it prints (a part of it)
		json   string // the problem's code under --json ("": the command has no --json)
	}{
		{"ok", []string{"runs", "result", s.okID, "--store", s.url}, exitOK, "", ""},
		{"other", []string{"server", "--store", s.url, "--insecure", "--listen", "0.0.0.0:0"}, exitError, "loopback", ""},
		{"usage", []string{"runs", "list", "--bogus", "--store", s.url}, exitUsage,
			"trellis: runs list: flag provided but not defined: --bogus\nrun 'trellis runs list -h' for usage\n", "usage"},
		{"usage of a group", []string{"runs", "frob"}, exitUsage, "trellis: runs: unknown subcommand \"frob\"\nrun 'trellis runs -h' for usage\n", "usage"},
		{"unknown command", []string{"frob"}, exitUsage, "trellis: unknown command \"frob\"\nrun 'trellis -h' for usage\n", "usage"},
		{"no store", []string{"runs", "list"}, exitUsage, "--store or --server is required, or set TRELLIS_STORE or TRELLIS_SERVER", "usage"},
		{"store refuses a value", []string{"schedules", "create", "x", "--workflow", "ok", "--cron", "0 25 * * *", "--store", s.url},
			exitUsage, "cron expression", "invalid_argument"},
		{"not found", []string{"runs", "get", "nope", "--store", s.url}, exitNotFound, "trellis: run \"nope\": run not found\n", "run_not_found"},
		{"not found through a server", []string{"runs", "get", "nope", "--server", base, "--token", admin}, exitNotFound, "nope", "run_not_found"},
		{"store file missing", []string{"runs", "list", "--store", "sqlite:///nonexistent/t.db"}, exitNotFound, "no store at /nonexistent/t.db", "store_not_found"},
		{"unauthenticated", []string{"runs", "get", s.okID, "--server", base, "--token", "wrong"}, exitPermission, "unauthenticated", "unauthenticated"},
		{"permission denied", []string{"runs", "cancel", s.okID, "--server", base, "--token", reader}, exitPermission, "permission denied", ""},
		{"permission denied: json", []string{"namespaces", "create", "x", "--server", base, "--token", reader}, exitPermission, "permission denied", "permission_denied"},
		{"tokens: permission denied", []string{"tokens", "list", "--server", base, "--token", reader}, exitPermission, "permission denied", "permission_denied"},
		{"conflict", []string{"runs", "cancel", s.okID, "--store", s.url}, exitConflict, "run already finished", ""},
		{"conflict through a server", []string{"runs", "cancel", s.okID, "--server", base, "--token", admin}, exitConflict, "finished", ""},
		{"conflict: exists", []string{"namespaces", "create", "default", "--store", s.url}, exitConflict, "already exists", "namespace_exists"},
		{"conflict: exists through a server", []string{"namespaces", "create", "default", "--server", base, "--token", admin}, exitConflict, "exists", "namespace_exists"},
		{"unavailable", []string{"runs", "list", "--server", "http://127.0.0.1:1", "--token", "x"}, exitUnavailable, "connection refused", "unavailable"},
		{"run failed: result", []string{"runs", "result", s.failedID, "--store", s.url}, exitRunFailed,
			"trellis: run " + s.failedRun + " (fails seed-fail) failed: ", "run_failed"},
		{"run failed: watch", []string{"runs", "watch", s.failedID, "--store", s.url}, exitRunFailed, "card declined", "run_failed"},
		{"run failed: watch --after now", []string{"runs", "watch", s.failedID, "--after", "now", "--store", s.url}, exitRunFailed, "card declined", "run_failed"},
		{"run cancelled: result", []string{"runs", "result", "to-cancel", "--store", s.url}, exitRunFailed, "(ok to-cancel) cancelled", "run_cancelled"},
		{"run cancelled: watch", []string{"runs", "watch", "to-cancel", "--server", base, "--token", admin}, exitRunFailed, "cancelled", "run_cancelled"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			res := trellisProcess(t, c.args...)
			if res.code != c.code || !strings.Contains(res.stderr, c.stderr) {
				t.Errorf("%q: exit %d, want %d; stderr %q, want %q", c.args, res.code, c.code, res.stderr, c.stderr)
			}
			if c.code == exitOK {
				if res.stderr != "" {
					t.Errorf("%q: stderr %q", c.args, res.stderr)
				}
				return
			}
			if !strings.HasPrefix(res.stderr, "trellis: ") || strings.Contains(res.stderr, "Usage:") {
				t.Errorf("%q: stderr %q", c.args, res.stderr)
			}
			if c.json == "" {
				return
			}
			// Under --json: the same status, one problem document on stderr.
			res = trellisProcess(t, append(c.args, "--json")...)
			var p problemDoc
			if err := json.Unmarshal([]byte(res.stderr), &p); err != nil || strings.Count(res.stderr, "\n") != 1 {
				t.Fatalf("%q --json: stderr %q is not one problem document: %v", c.args, res.stderr, err)
			}
			if res.code != c.code || p.Code != c.json || p.Title == "" || p.Detail == "" || !strings.HasPrefix(p.Type, "https://") ||
				(c.code != exitRunFailed && (p.Status < 400 || p.Status > 599)) {
				t.Errorf("%q --json: exit %d, problem %+v; want exit %d, code %q", c.args, res.code, p, c.code, c.json)
			}
		})
	}
}

// runs result waits for a run that has not ended and prints its output once a
// worker has run it.
func TestRunsResultWaits(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	double := trellis.NewWorkflow("double", func(wc *trellis.Context, n int) (int, error) { return 2 * n, nil })
	trellisCmd(t, "migrate", "--store", url).ok(t)
	trellisCmd(t, "runs", "start", "double", "--input", "21", "--id", "d-1", "--store", url).ok(t)
	var wg sync.WaitGroup
	var res result
	wg.Add(1)
	go func() {
		defer wg.Done()
		res = trellisCmd(t, "runs", "result", "d-1", "--store", url)
	}()
	time.Sleep(300 * time.Millisecond) // the command waits: no worker yet
	c := openClient(t, url, false, double)
	defer c.Close()
	wg.Wait()
	if res.code != exitOK || res.stdout != "42\n" || res.stderr != "" {
		t.Errorf("runs result: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	res = trellisCmd(t, "runs", "result", "d-1", "--json", "--store", url).ok(t)
	var run trellis.Run
	if err := json.Unmarshal([]byte(res.stdout), &run); err != nil || run.Status != trellis.StatusSucceeded || string(run.Output) != "42" {
		t.Errorf("runs result --json: %v %s", err, res.stdout)
	}
}

// An error no sentinel names exits 1, and is a problem of code "error".
func TestOtherErrorClass(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if code := report(errors.New("disk on fire"), true, &out); code != exitError {
		t.Errorf("exit %d", code)
	}
	var p problemDoc
	if err := json.Unmarshal(out.Bytes(), &p); err != nil || p.Code != "error" || p.Status != 500 || p.Detail != "disk on fire" || p.Type != cliProblemBase {
		t.Errorf("problem %+v %v", p, err)
	}
	out.Reset()
	if code := report(fmt.Errorf("wrapped: %w", trellis.ErrRunNotFound), false, &out); code != exitNotFound || out.String() != "trellis: wrapped: run not found\n" {
		t.Errorf("exit %d %q", code, out.String())
	}
}

// docs/cli.md documents every exit status, every code of the command line's
// own and every environment variable that trellis -h lists.
func TestCLIDoc(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, code := range []int{exitOK, exitError, exitUsage, exitNotFound, exitPermission, exitConflict, exitUnavailable, exitRunFailed, exitInterrupted} {
		contains(t, "docs/cli.md", doc, fmt.Sprintf("\n| %d | ", code))
	}
	for _, c := range []errorClass{usageClass, otherClass, runFailedClass, runCancelClass, interruptClass, classify(errNoStoreFile)} {
		contains(t, "docs/cli.md", doc, fmt.Sprintf("| `%s` | %d | %d |", c.code, c.status, c.exit))
	}
	help := trellisCmd(t, "-h").ok(t).stdout
	_, env, _ := strings.Cut(help, "\nEnvironment:\n")
	env, _, _ = strings.Cut(env, "\n\n")
	for line := range strings.SplitSeq(env, "\n") {
		if name, _, ok := strings.Cut(strings.TrimSpace(line), " "); ok && strings.ToUpper(name) == name && !strings.HasPrefix(line, "    ") {
			contains(t, "docs/cli.md", doc, "| `"+name+"` |")
		}
	}
}

// Ctrl-C while runs result waits: 130, and under --json a problem of code
// "interrupted"; the run is left as it was.
func TestResultInterrupted(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	trellisCmd(t, "migrate", "--store", url).ok(t)
	trellisCmd(t, "runs", "start", "nobody-runs-it", "--id", "w-1", "--store", url).ok(t)
	for _, asJSON := range []bool{false, true} {
		ctx, cancel := context.WithCancel(ctxT(t))
		time.AfterFunc(300*time.Millisecond, cancel)
		args := []string{"runs", "result", "w-1", "--store", url}
		if asJSON {
			args = append(args, "--json")
		}
		var out, errOut bytes.Buffer
		code := run(ctx, args, &out, &errOut)
		cancel()
		if code != exitInterrupted || out.Len() != 0 {
			t.Fatalf("%q: exit %d, stdout %q, stderr %q", args, code, out.String(), errOut.String())
		}
		if !asJSON {
			if errOut.String() != "trellis: interrupted\n" {
				t.Errorf("stderr %q", errOut.String())
			}
			continue
		}
		var p problemDoc
		if err := json.Unmarshal(errOut.Bytes(), &p); err != nil || p.Code != "interrupted" || p.Type != cliProblemBase {
			t.Errorf("--json: stderr %q: %+v %v", errOut.String(), p, err)
		}
	}
	if res := trellisCmd(t, "runs", "get", "w-1", "--json", "--store", url).ok(t); !strings.Contains(res.stdout, `"status": "pending"`) {
		t.Errorf("the run after an interrupted wait:\n%s", res.stdout)
	}
}

// Every error of the HTTP API's table has a class of its own (only 405, a
// client's bug, is "other"), on a store as through a server (by its code).
func TestEveryProblemHasAClass(t *testing.T) {
	t.Parallel()
	for _, e := range problem.Table() {
		local := classify(fmt.Errorf("doing it: %w", e.Err))
		remote := classify(fmt.Errorf("calling: %w", &httpc.Problem{Status: e.Status, Code: e.Code, Title: e.Title, Detail: "x"}))
		if local != remote || local.code != e.Code || local.status != e.Status {
			t.Errorf("%s: on a store %+v, through a server %+v", e.Code, local, remote)
		}
		if local.exit == exitError && e.Code != "method_not_allowed" {
			t.Errorf("%s (HTTP %d) exits 1, as an error of no class", e.Code, e.Status)
		}
	}
}
