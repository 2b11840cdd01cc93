package main

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/pgtest"
)

// versionedWF is the workflow "versioned" at version v, serving older too: it
// returns the version its run started with.
func versionedWF(v int, older ...int) *trellis.Workflow[string, int] {
	return trellis.NewWorkflow("versioned", func(wc *trellis.Context, _ string) (int, error) {
		return wc.Version(), nil
	}, trellis.WorkflowOptions{Version: v, AlsoServes: older})
}

// Versions and schedules through a `trellis server` process and the CLI as
// processes, with remote workers (the worker protocol): `runs start
// --version` pins a run, which waits with its reason while the remote worker
// serves another version and runs once one serves it; a bad version is
// refused by the CLI and by the API; `schedules create` of a workflow no
// worker serves succeeds with a warning. On SQLite and Postgres.
func TestVersionsThroughServerProcess(t *testing.T) {
	for name, url := range map[string]func(t *testing.T) string{
		"sqlite":   storeURL,
		"postgres": func(t *testing.T) string { return pgtest.SchemaURL(t) },
	} {
		t.Run(name, func(t *testing.T) { versionsThroughServer(t, url(t)) })
	}
}

func versionsThroughServer(t *testing.T, url string) {
	trellisCmd(t, "migrate", "--store", url).ok(t)
	token := strings.TrimSpace(trellisCmd(t, "tokens", "create", "--name", "all", "--grant", "admin:default",
		"--grant", "producer:default", "--grant", "reader:default", "--grant", "worker:default", "--store", url).ok(t).stdout)
	srv := startTrellisServer(t, "--store", url, "--listen", "127.0.0.1:0")
	base := srv.base()
	remote := func(wf *trellis.Workflow[string, int]) *trellis.Worker {
		t.Helper()
		cfg := trellis.Config{Server: base, Token: token}
		cfg.Worker.PollInterval = 50 * time.Millisecond
		w, err := trellis.NewWorker(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = w.Client().Close() })
		if err := w.Register(context.Background(), wf); err != nil {
			t.Fatal(err)
		}
		return w
	}
	remote(versionedWF(2))
	cli := func(args ...string) result {
		return trellisProcess(t, append(args, "--server", base, "--token", token)...)
	}
	startPinned := func(version string) *trellis.Run {
		t.Helper()
		res := cli("runs", "start", "versioned", "--input", `"x"`, "--version", version, "--json").ok(t)
		var run trellis.Run
		if err := json.Unmarshal([]byte(res.stdout), &run); err != nil {
			t.Fatalf("runs start printed %q: %v", res.stdout, err)
		}
		return &run
	}
	c, err := trellis.Open(context.Background(), trellis.Config{Server: base, Token: token})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	v3 := startPinned("3")
	if want := `version 3 of workflow "versioned" is served by no live worker; live workers serve version 2`; !v3.Pinned || v3.Version != 3 || v3.WaitReason != want {
		t.Fatalf("run pinned to 3: pinned %v, version %d, wait reason %q; want %q", v3.Pinned, v3.Version, v3.WaitReason, want)
	}
	v2 := startPinned("2")
	if run, err := c.Wait(ctxT(t), v2.ID); err != nil || run.Status != trellis.StatusSucceeded || string(run.Output) != "2" {
		t.Fatalf("run pinned to 2: %+v, %v", run, err)
	}
	time.Sleep(200 * time.Millisecond)
	if run, err := c.Get(ctxT(t), v3.ID); err != nil || run.Status != trellis.StatusPending || run.Attempts != 0 {
		t.Fatalf("run pinned to 3 with a worker of 2 only: %+v, %v", run, err)
	}
	res := cli("runs", "get", v3.ID).ok(t)
	contains(t, "runs get of a pinned run", res.stdout, "version 3 of workflow", "3 (pinned")

	// Bad versions: the CLI's usage error, the API's 400; nothing started.
	res = cli("runs", "start", "versioned", "--version", "-2")
	if res.code != 2 || !strings.Contains(res.stderr, "--version -2") {
		t.Fatalf("runs start --version -2: exit %d, stderr %q", res.code, res.stderr)
	}
	for _, body := range []string{`{"workflow":"versioned","version":-1}`, `{"workflow":"versioned","version":2147483648}`,
		`{"workflow":"versioned","version":"3"}`} {
		req, _ := http.NewRequestWithContext(ctxT(t), "POST", base+"/v1/namespaces/default/runs", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var problem struct{ Code string }
		_ = json.NewDecoder(resp.Body).Decode(&problem)
		resp.Body.Close()
		if resp.StatusCode != 400 || problem.Code != "invalid_argument" {
			t.Fatalf("POST runs %s: %d %q, want 400 invalid_argument", body, resp.StatusCode, problem.Code)
		}
	}
	if page, err := c.List(ctxT(t), trellis.ListOptions{}); err != nil || len(page.Runs) != 2 {
		t.Fatalf("runs after the refused starts: %v, %v", page, err)
	}

	// A schedule of a workflow that no worker serves: created, with a warning.
	res = cli("schedules", "create", "early", "--workflow", "later", "--cron", "@daily")
	if res.code != 0 || !strings.Contains(res.stderr, `warning: no live worker serves workflow "later"`) {
		t.Fatalf("schedules create of an unserved workflow: exit %d, stderr %q", res.code, res.stderr)
	}
	res = cli("schedules", "create", "served", "--workflow", "versioned", "--cron", "@daily", "--input", `"x"`).ok(t)
	if strings.Contains(res.stderr, "warning") {
		t.Fatalf("schedules create of a served workflow warned: %q", res.stderr)
	}

	// A worker of 3 runs the run pinned to 3.
	remote(versionedWF(3, 1))
	if run, err := c.Wait(ctxT(t), v3.ID); err != nil || run.Status != trellis.StatusSucceeded || string(run.Output) != "3" {
		t.Fatalf("run pinned to 3 once a worker of 3 serves: %+v, %v", run, err)
	}
	res = cli("workers", "list", "--json").ok(t)
	contains(t, "workers list", res.stdout, `"versions"`)
}
