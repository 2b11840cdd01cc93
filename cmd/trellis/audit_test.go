package main

import (
	"encoding/json"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/server"
)

// A real `trellis server --require-idempotency-key` process: the CLI's
// changes through it (each sent with a key) are in its audit log, which
// `trellis audit list` reads through the server (an admin of every namespace,
// with filters) and, once the server has stopped, from the store; the
// server's stderr has an access log line per request without a secret.
func TestAuditThroughServerProcess(t *testing.T) {
	url := storeURL(t)
	p := startTrellisServer(t, "--store", url, "--listen", "127.0.0.1:0", "--require-idempotency-key")
	root := p.adminToken(t)
	as := func(token string, args ...string) []string {
		return append(args, "--server", p.base(), "--token", token)
	}

	res := trellisCmd(t, as(root, "tokens", "create", "--name", "ci", "--grant", "producer:default", "--grant", "reader:default")...).ok(t)
	ci := strings.TrimSpace(res.stdout)
	var run struct{ ID string }
	res = trellisCmd(t, as(ci, "runs", "start", "nobody-serves", "--id", "aud-1", "--json")...).ok(t)
	if err := json.Unmarshal([]byte(res.stdout), &run); err != nil || run.ID == "" {
		t.Fatalf("runs start --json: %v %s", err, res.stdout)
	}
	trellisCmd(t, as(ci, "runs", "cancel", "aud-1")...).ok(t)
	if res := trellisCmd(t, as(ci, "runs", "cancel", "aud-1")...); res.code != exitConflict {
		t.Fatalf("cancelling a cancelled run: exit %d %s", res.code, res.stderr)
	}
	trellisCmd(t, as(root, "queues", "create", "q1", "--concurrency-limit", "2")...).ok(t)

	// The entries are written within the flush interval (1 s).
	var page server.AuditList
	deadline := time.Now().Add(15 * time.Second)
	for {
		res := trellisCmd(t, as(root, "audit", "list", "--json")...).ok(t)
		if err := json.Unmarshal([]byte(res.stdout), &page); err != nil {
			t.Fatalf("audit list --json: %v: %s", err, res.stdout)
		}
		if len(page.Entries) >= 5 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	want := []struct{ action, principal, outcome, target string }{
		{"queue.create", "admin", "ok", "q1"},
		{"run.cancel", "ci", "run_finished", run.ID},
		{"run.cancel", "ci", "ok", run.ID},
		{"run.start", "ci", "ok", run.ID},
		{"token.create", "admin", "ok", "ci"},
	}
	if len(page.Entries) != len(want) {
		t.Fatalf("audit list: %d entries, want %d: %+v", len(page.Entries), len(want), page.Entries)
	}
	for i, w := range want {
		en := page.Entries[i]
		if en.Action != w.action || en.Principal != w.principal || en.Outcome != w.outcome || en.Target.ID != w.target ||
			en.Source != "127.0.0.1" || len(en.RequestID) != 24 || en.Via != "api" {
			t.Errorf("entry %d = %+v, want %s by %s: %s on %s", i, *en, w.action, w.principal, w.outcome, w.target)
		}
	}
	table := trellisCmd(t, as(root, "audit", "list", "--action", "run.*", "--principal", "ci", "--since", "1h")...).ok(t).stdout
	contains(t, "audit list", table, "TIME", "PRINCIPAL", "run.cancel", "run_finished", "run.start", "127.0.0.1")
	if strings.Contains(table, "token.create") || strings.Contains(table, "queue.create") {
		t.Errorf("audit list --action run.* shows other actions:\n%s", table)
	}
	res = trellisCmd(t, as(root, "audit", "list", "--namespace", "default", "--limit", "2")...).ok(t)
	if strings.Contains(res.stdout, "cursor") || !strings.HasPrefix(res.stderr, "next cursor: ") {
		t.Errorf("audit list --limit 2: the cursor belongs on stderr: stdout\n%s\nstderr %q", res.stdout, res.stderr)
	}
	if res := trellisCmd(t, as(ci, "audit", "list")...); res.code != exitPermission || !strings.Contains(res.stderr, "permission denied") {
		t.Errorf("audit list by a producer: exit %d %s", res.code, res.stderr)
	}
	if res := trellisCmd(t, as(root, "audit", "list", "--since", "yesterday")...); res.code != 2 {
		t.Errorf("audit list --since yesterday: exit %d %s", res.code, res.stderr)
	}

	// The access log: a line per request, no secret, no payload.
	p.signal(t, syscall.SIGTERM)
	if code := p.wait(t, 30*time.Second); code != 0 {
		t.Fatalf("server exited %d", code)
	}
	logs := p.errOut.String()
	contains(t, "the server's stderr", logs, "msg=request", "method=POST", "route=/v1/tokens", "status=201", "principal=admin",
		"route=/v1/namespaces/{ns}/runs/{id}/cancel", "status=409", "principal=ci", "route=/v1/audit")
	for _, secret := range []string{root, ci} {
		if strings.Contains(logs, secret) {
			t.Errorf("the server's stderr holds a token's secret")
		}
	}

	// From the store, once the server has stopped: the same entries.
	res = trellisCmd(t, "audit", "list", "--json", "--store", url).ok(t)
	var fromStore server.AuditList
	if err := json.Unmarshal([]byte(res.stdout), &fromStore); err != nil || len(fromStore.Entries) != len(want) {
		t.Fatalf("audit list --store: %v %s", err, res.stdout)
	}
}

func TestAuditUsage(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	trellisCmd(t, "migrate", "--store", url).ok(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"audit"}, "no subcommand"},
		{[]string{"audit", "frob"}, "unknown subcommand"},
		{[]string{"audit", "list", "extra", "--store", url}, "unexpected argument"},
		{[]string{"audit", "list", "--limit", "5000", "--store", url}, "--limit 5000"},
		{[]string{"audit", "list", "--since", "soon", "--store", url}, "--since"},
		{[]string{"audit", "list", "--action", "*", "--store", url}, "Action"},
		{[]string{"audit", "list", "--cursor", "x", "--store", url}, "Cursor"},
		{[]string{"audit", "list"}, "--store or --server is required"},
	} {
		res := trellisCmd(t, c.args...)
		if res.code != 2 || !strings.Contains(res.stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, res.code, res.stderr, c.want)
		}
	}
	res := trellisCmd(t, "audit", "list", "--store", url).ok(t)
	contains(t, "audit list of an empty log", res.stdout, "no entries")
}
