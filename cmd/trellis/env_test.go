package main

import (
	"strings"
	"testing"

	"github.com/trellis-dev/trellis"
)

// TRELLIS_STORE and TRELLIS_NAMESPACE stand in for --store and --namespace; the
// flags win over them. (Not parallel: it sets the environment.)
func TestStoreAndNamespaceFromEnvironment(t *testing.T) {
	url := storeURL(t)
	trellisCmd(t, "migrate", "--store", url).ok(t)
	t.Setenv(envStore, url)
	t.Setenv(envNamespace, "team-a")

	res := trellisCmd(t, "runs", "start", "greet", "--input", `"ada"`, "--id", "g-1").ok(t)
	contains(t, "start", res.stdout, "Namespace:", "team-a")
	res = trellisCmd(t, "runs", "list").ok(t)
	contains(t, "list from env", res.stdout, "g-1", "greet")
	if res := trellisCmd(t, "runs", "list", "--namespace", "default").ok(t); res.stdout != "no runs\n" {
		t.Errorf("--namespace default lists runs of team-a:\n%s", res.stdout)
	}
	res = trellisCmd(t, "runs", "get", "g-1", "--store", url, "--namespace", "team-a").ok(t)
	contains(t, "get with flags", res.stdout, "team-a")
	if res := trellisCmd(t, "runs", "get", "g-1", "--store", "sqlite:///nonexistent/t.db"); res.code != exitNotFound ||
		!strings.Contains(res.stderr, "no store at /nonexistent/t.db") {
		t.Errorf("--store does not override TRELLIS_STORE: exit %d %q", res.code, res.stderr)
	}
	trellisCmd(t, "runs", "cancel", "g-1").ok(t)
	if res := trellisCmd(t, "approvals", "list").ok(t); strings.Contains(res.stdout, "g-1") {
		t.Errorf("approvals list: %s", res.stdout)
	}

	c := openClientIn(t, url, "team-a")
	defer c.Close()
	run, err := c.Get(ctxT(t), "g-1")
	if err != nil || run.Namespace != "team-a" || run.Status != trellis.StatusCancelled {
		t.Fatalf("run in team-a: %+v %v", run, err)
	}

	t.Setenv(envStore, "")
	if res := trellisCmd(t, "runs", "list"); res.code != exitUsage || !strings.Contains(res.stderr, "--store or --server is required, or set TRELLIS_STORE or TRELLIS_SERVER") {
		t.Errorf("no store at all: exit %d %q", res.code, res.stderr)
	}
}

// openClientIn opens a client without worker on url, in namespace ns.
func openClientIn(t *testing.T, url, ns string) *trellis.Client {
	t.Helper()
	c, err := trellis.Open(ctxT(t), trellis.Config{Store: url, Namespace: ns, Worker: trellis.WorkerOptions{Disabled: true}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
