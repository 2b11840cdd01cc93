package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis"
)

// TestRunsThroughServer starts and inspects runs through `trellis server` with
// --server and --token (and their environment variables), a worker on the
// server's store running them.
func TestRunsThroughServer(t *testing.T) {
	s := seed(t)
	base, secret, stop := startServer(t, s.url)
	defer stop()
	w := openClient(t, s.url, false, s.workflows...)
	defer w.Close()

	res := trellisCmd(t, "runs", "start", "ok", "--input", "5", "--id", "remote-1", "--json", "--server", base, "--token", secret).ok(t)
	var run trellis.Run
	if err := json.Unmarshal([]byte(res.stdout), &run); err != nil || run.WorkflowID != "remote-1" {
		t.Fatalf("runs start printed %q (%v)", res.stdout, err)
	}
	if _, err := w.Wait(ctxT(t), run.ID); err != nil {
		t.Fatal(err)
	}
	t.Setenv(envServer, base)
	t.Setenv(envToken, secret)
	res = trellisCmd(t, "runs", "get", "remote-1").ok(t)
	contains(t, "runs get", res.stdout, run.ID, "succeeded", "10")
	res = trellisCmd(t, "runs", "list").ok(t)
	contains(t, "runs list", res.stdout, run.ID, s.okRun)
	// --workflow-id, through the server and on the store, lists that ID's runs only.
	for _, target := range [][]string{nil, {"--store", s.url}} {
		res = trellisCmd(t, append([]string{"runs", "list", "--workflow-id", "remote-1", "--json"}, target...)...).ok(t)
		var page trellis.RunPage
		if err := json.Unmarshal([]byte(res.stdout), &page); err != nil || len(page.Runs) != 1 || page.Runs[0].ID != run.ID {
			t.Fatalf("runs list --workflow-id %v: %s (%v)", target, res.stdout, err)
		}
	}
	trellisCmd(t, "workers", "list").ok(t)
	trellisCmd(t, "approvals", "list").ok(t)
}

func TestServerFlagErrors(t *testing.T) {
	s := seed(t)
	base, secret, stop := startServer(t, s.url)
	defer stop()
	res := trellisCmd(t, "runs", "get", s.okID, "--server", base, "--token", "wrong")
	if res.code != exitPermission || !strings.Contains(res.stderr, "unauthenticated") {
		t.Errorf("wrong token: exit %d %q", res.code, res.stderr)
	}
	res = trellisCmd(t, "runs", "get", "no-such-run", "--server", base, "--token", secret)
	if res.code != exitNotFound || !strings.Contains(res.stderr, "no-such-run") {
		t.Errorf("unknown run: exit %d %q", res.code, res.stderr)
	}
	res = trellisCmd(t, "runs", "list", "--server", base, "--store", s.url)
	if res.code != 2 || !strings.Contains(res.stderr, "--store and --server exclude each other") {
		t.Errorf("--store and --server: exit %d %q", res.code, res.stderr)
	}
	t.Setenv(envStore, s.url)
	t.Setenv(envServer, base)
	if res = trellisCmd(t, "runs", "list"); res.code != 2 {
		t.Errorf("both environment variables: exit %d %q", res.code, res.stderr)
	}
	trellisCmd(t, "runs", "list", "--server", base, "--token", secret).ok(t) // a flag wins over the environment
}
