package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

func TestMigrateTwice(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	for range 2 {
		res := trellisCmd(t, "migrate", "--store", url).ok(t)
		if res.stdout != "migrated "+url+"\n" {
			t.Errorf("migrate printed %q", res.stdout)
		}
	}
	if res := trellisCmd(t, "runs", "list", "--store", url).ok(t); res.stdout != "no runs\n" {
		t.Errorf("list of a migrated store: %q", res.stdout)
	}
	if res := trellisCmd(t, "migrate"); res.code != 2 || !strings.Contains(res.stderr, "--store is required") {
		t.Errorf("migrate without store: exit %d %q", res.code, res.stderr)
	}
}

func TestUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"help"}, {"-h"}, {"--help"}, {"help", "-h"}} {
		res := trellisCmd(t, args...).ok(t)
		contains(t, "help", res.stdout, "Commands:", "dev", "runs", "migrate", "bench")
	}
	res := trellisCmd(t, "help", "runs").ok(t)
	contains(t, "help runs", res.stdout, "Subcommands:", "list", "history", "resume")
	res = trellisCmd(t, "help", "migrate").ok(t)
	contains(t, "help migrate", res.stdout, "Usage: trellis migrate --store URL", "--store")

	for _, args := range [][]string{{}, {"frob"}, {"bench"}, {"bench", "-n", "5"}, {"dev", "extra"}} {
		if res := trellisCmd(t, args...); res.code != 2 || res.stderr == "" || res.stdout != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q", args, res.code, res.stdout, res.stderr)
		}
	}
}

// Every command and subcommand answers -h and --help with its usage and flags
// (as --name) on stdout, and exits 0.
func TestHelpEverywhere(t *testing.T) {
	t.Parallel()
	commands := [][]string{
		{}, {"runs"}, {"approvals"}, {"dev"}, {"migrate"}, {"bench"}, {"version"},
		{"runs", "start"}, {"runs", "list"}, {"runs", "get"}, {"runs", "history"}, {"runs", "cancel"}, {"runs", "watch"}, {"runs", "result"},
		{"runs", "resume"}, {"runs", "send-event"}, {"runs", "reset"},
		{"approvals", "list"}, {"approvals", "approve"}, {"approvals", "reject"},
		{"workers"}, {"workers", "list"},
		{"tokens"}, {"tokens", "create"}, {"tokens", "list"}, {"tokens", "revoke"},
		{"namespaces", "create"}, {"namespaces", "update"}, {"queues", "create"}, {"queues", "update"},
		{"schedules", "create"}, {"schedules", "update"}, {"schedules", "backfill"},
	}
	goStyle := regexp.MustCompile(`(?m)^\s+-[a-z]`)
	for _, cmd := range commands {
		for _, h := range []string{"-h", "--help"} {
			args := append(slices.Clone(cmd), h)
			res := trellisCmd(t, args...)
			if res.code != 0 || res.stderr != "" || !strings.Contains(res.stdout, "Usage") {
				t.Errorf("%q: exit %d\nstdout:\n%s\nstderr:\n%s", args, res.code, res.stdout, res.stderr)
			}
			if len(cmd) > 0 && cmd[0] != "version" && !strings.Contains(res.stdout, "--store") {
				t.Errorf("%q: no --store flag in\n%s", args, res.stdout)
			}
			if len(cmd) > 0 && (cmd[0] == "runs" || cmd[0] == "approvals" || cmd[0] == "workers") && !strings.Contains(res.stdout, "--namespace") {
				t.Errorf("%q: no --namespace flag in\n%s", args, res.stdout)
			}
			if len(cmd) > 0 && (cmd[0] == "runs" || cmd[0] == "approvals" || cmd[0] == "workers") && !strings.Contains(res.stdout, "--server") {
				t.Errorf("%q: no --server flag in\n%s", args, res.stdout)
			}
			for _, line := range strings.Split(res.stdout, "\n") {
				if strings.HasPrefix(line, "    \t") && strings.Count(line, "(default ") > 1 {
					t.Errorf("%q: a flag with two defaults: %q", args, line)
				}
			}
			if goStyle.MatchString(res.stdout) {
				t.Errorf("%q: flags shown as -name:\n%s", args, res.stdout)
			}
		}
	}
	// Each list of subcommands has its descriptions in one column, at least two
	// spaces after the longest name.
	for _, group := range []string{"", "runs", "approvals", "workers", "tokens", "audit", "namespaces", "queues", "schedules"} {
		args := []string{"--help"}
		if group != "" {
			args = []string{group, "--help"}
		}
		out := trellisCmd(t, args...).stdout
		_, list, ok := strings.Cut(out, "Subcommands:\n")
		if !ok {
			_, list, ok = strings.Cut(out, "Commands:\n")
		}
		if !ok {
			t.Errorf("%q: no list of subcommands in\n%s", args, out)
			continue
		}
		list, _, _ = strings.Cut(list, "\n\n")
		col := -1
		for _, line := range strings.Split(list, "\n") {
			name := strings.Fields(line)[0]
			at := strings.Index(line, name) + len(name)
			desc := at + len(line[at:]) - len(strings.TrimLeft(line[at:], " "))
			if desc-at < 2 || col >= 0 && desc != col {
				t.Errorf("%q: %q is out of line with the others", args, line)
			}
			col = desc
		}
	}
	res := trellisCmd(t, "runs", "list", "--bogus", "--store", "x")
	if res.code != 2 || !strings.Contains(res.stderr, "flag provided but not defined: --bogus") || res.stdout != "" {
		t.Errorf("unknown flag: exit %d %q", res.code, res.stderr)
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	res := trellisCmd(t, "version").ok(t)
	if !regexp.MustCompile(`^trellis \S+.* go1\.\S+ \w+/\w+\n$`).MatchString(res.stdout) || !strings.Contains(res.stdout, runtime.Version()) {
		t.Errorf("version printed %q", res.stdout)
	}
	if res := trellisCmd(t, "version", "extra"); res.code != 2 {
		t.Errorf("version extra: exit %d", res.code)
	}
	res = trellisCmd(t, "version", "--json").ok(t)
	var v map[string]any
	if err := json.Unmarshal([]byte(res.stdout), &v); err != nil {
		t.Fatalf("version --json: %v\n%s", err, res.stdout)
	}
	p, _ := v["protocols"].(map[string]any)
	if v["go"] != runtime.Version() || v["os"] != runtime.GOOS || v["arch"] != runtime.GOARCH || v["version"] == "" ||
		p["http_api"] != "v1" || p["worker"] != "trellis.worker.v1" || p["history"] != trellis.HistoryFormat {
		t.Errorf("version --json printed %s", res.stdout)
	}
	// The one line and the JSON tell the same version.
	if line := trellisCmd(t, "version").ok(t).stdout; !strings.HasPrefix(line, "trellis "+v["version"].(string)+" ") {
		t.Errorf("version %q, version --json %v", line, v["version"])
	}
}

func TestErrorTypeShown(t *testing.T) {
	t.Parallel()
	for typ, want := range map[string]string{
		"": "", "*errors.errorString": "", "*fmt.wrapError": "", "*trellis.nonRetryable": "",
		"step_timeout": "step_timeout", "*fs.PathError": "*fs.PathError",
	} {
		if got := errorType(typ); got != want {
			t.Errorf("errorType(%q) = %q, want %q", typ, got, want)
		}
	}
}

func TestParseArgs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args      []string
		store     string
		json      bool
		positions []string
	}{
		{args: []string{"id", "--store", "s"}, store: "s", positions: []string{"id"}},
		{args: []string{"--store=s", "id", "-json"}, store: "s", json: true, positions: []string{"id"}},
		{args: []string{"a", "--json", "b"}, json: true, positions: []string{"a", "b"}},
		{args: []string{"--store", "s", "--", "-id", "--json"}, store: "s", positions: []string{"-id", "--json"}},
		{args: nil},
	}
	for _, tt := range tests {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		store, asJSON := fs.String("store", "", ""), fs.Bool("json", false, "")
		pos, err := parseArgs(fs, tt.args)
		if err != nil || *store != tt.store || *asJSON != tt.json || !slices.Equal(pos, tt.positions) {
			t.Errorf("%q: store %q json %v positions %q err %v", tt.args, *store, *asJSON, pos, err)
		}
	}
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var ue *usageError
	if _, err := parseArgs(fs, []string{"id", "--nope"}); !errors.As(err, &ue) || !strings.Contains(ue.msg, "-nope") {
		t.Errorf("unknown flag: %v", err)
	}
	var he *helpError
	if _, err := parseArgs(fs, []string{"-h"}); !errors.As(err, &he) || !errors.Is(err, flag.ErrHelp) {
		t.Errorf("-h: %v", err)
	}
}

// TestInterrupted: a cancelled context (SIGINT) ends a command with status 130.
func TestInterrupted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(ctxT(t))
	defer cancel()
	time.AfterFunc(500*time.Millisecond, cancel) // while dev watches its runs
	var out, errOut bytes.Buffer
	if code := run(ctx, []string{"dev", "--store", storeURL(t)}, &out, &errOut); code != 130 {
		t.Errorf("exit %d\n%s%s", code, out.String(), errOut.String())
	}
}
