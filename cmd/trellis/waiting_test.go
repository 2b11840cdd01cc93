package main

import (
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

func waitReason(t *testing.T, c *trellis.Client, ref, want string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		run, err := c.Get(ctxT(t), ref)
		if err != nil {
			t.Fatal(err)
		}
		if run.Status == trellis.StatusWaiting && strings.Contains(run.WaitReason, want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: %s %q, want waiting for %q", ref, run.Status, run.WaitReason, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestSendEventAndDecideApproval(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	wf := trellis.NewWorkflow("ship", func(wc *trellis.Context, _ int) (string, error) {
		box, err := trellis.WaitEvent[string](wc, "packed", 0)
		if err != nil {
			return "", err
		}
		d, err := trellis.Approval(wc, "ship-it", trellis.ApprovalOptions{Subject: "ship " + box})
		if err != nil {
			return "", err
		}
		return box + " shipped, approved by " + d.Principal + ": " + d.Comment, nil
	})
	c := openClient(t, url, false, wf)
	t.Cleanup(func() { c.Close() })
	h, err := trellis.Start(ctxT(t), c, wf, 0, trellis.StartOptions{ID: "order-9"})
	if err != nil {
		t.Fatal(err)
	}
	waitReason(t, c, h.RunID(), `event "packed"`)

	for _, bad := range [][]string{
		{"runs", "send-event", "order-9", "--store", url},
		{"runs", "send-event", "order-9", "--name", "packed", "--payload", "{not json", "--store", url},
	} {
		if res := trellisCmd(t, bad...); res.code != 2 {
			t.Errorf("%v: exit %d, want 2 (usage)\n%s", bad, res.code, res.stderr)
		}
	}
	if res := trellisCmd(t, "runs", "send-event", "no-such-run", "--name", "x", "--store", url); res.code != exitNotFound || !strings.Contains(res.stderr, "run not found") {
		t.Errorf("event to unknown run: exit %d %q", res.code, res.stderr)
	}
	trellisCmd(t, "runs", "send-event", "order-9", "--name", "packed", "--payload", `"box-1"`, "--store", url).ok(t)
	waitReason(t, c, h.RunID(), "ship-it")

	res := trellisCmd(t, "approvals", "list", "--status", "pending", "--store", url).ok(t)
	contains(t, "approvals list", res.stdout, "ship-it", "pending", "ship box-1", h.RunID())
	page, err := c.Approvals(ctxT(t), trellis.ApprovalFilter{Run: h.RunID()})
	if err != nil || len(page.Approvals) != 1 {
		t.Fatalf("approvals %+v %v", page, err)
	}
	id := page.Approvals[0].ID
	if res := trellisCmd(t, "approvals", "approve", id, "--store", url); res.code != 2 {
		t.Errorf("approve without --as: exit %d", res.code)
	}
	res = trellisCmd(t, "approvals", "approve", id, "--as", "alice", "--comment", "looks good", "--store", url).ok(t)
	contains(t, "approve", res.stdout, "approved by alice")
	if res := trellisCmd(t, "approvals", "reject", id, "--as", "bob", "--store", url); res.code != exitConflict || !strings.Contains(res.stderr, "already decided") {
		t.Errorf("second decision: exit %d %q", res.code, res.stderr)
	}
	out, err := h.Result(ctxT(t))
	if err != nil || out != "box-1 shipped, approved by alice: looks good" {
		t.Fatalf("result %q %v", out, err)
	}
}

// An approval is addressable by its run (workflow ID or run ID) and its name.
func TestDecideApprovalByRunAndName(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	wf := trellis.NewWorkflow("deploy", func(wc *trellis.Context, _ int) (string, error) {
		d, err := trellis.Approval(wc, "go-live", trellis.ApprovalOptions{Subject: "deploy v2"})
		if err != nil {
			return "", err
		}
		return "decided by " + d.Principal, nil
	})
	c := openClient(t, url, false, wf)
	t.Cleanup(func() { c.Close() })
	h, err := trellis.Start(ctxT(t), c, wf, 0, trellis.StartOptions{ID: "deploy-7"})
	if err != nil {
		t.Fatal(err)
	}
	waitReason(t, c, h.RunID(), "go-live")

	res := trellisCmd(t, "approvals", "list", "--run", "deploy-7", "--store", url).ok(t)
	contains(t, "list --run WORKFLOW-ID", res.stdout, "go-live", "pending", h.RunID())
	if res := trellisCmd(t, "approvals", "list", "--run", "no-such-run", "--store", url); res.code != exitNotFound || !strings.Contains(res.stderr, "run not found") {
		t.Errorf("list --run unknown: exit %d %q", res.code, res.stderr)
	}
	if res := trellisCmd(t, "approvals", "approve", "deploy-7", "go-dead", "--as", "alice", "--store", url); res.code != exitNotFound ||
		!strings.Contains(res.stderr, `none named "go-dead"`) {
		t.Errorf("unknown name: exit %d %q", res.code, res.stderr)
	}
	if res := trellisCmd(t, "approvals", "approve", "deploy-7", "go-live", "extra", "--as", "alice", "--store", url); res.code != 2 {
		t.Errorf("three arguments: exit %d", res.code)
	}
	res = trellisCmd(t, "approvals", "approve", "deploy-7", "go-live", "--as", "alice", "--store", url).ok(t)
	contains(t, "approve RUN NAME", res.stdout, "approved by alice", h.RunID())
	if res := trellisCmd(t, "approvals", "reject", h.RunID(), "go-live", "--as", "bob", "--store", url); res.code != exitConflict ||
		!strings.Contains(res.stderr, "already decided") {
		t.Errorf("second decision by run ID and name: exit %d %q", res.code, res.stderr)
	}
	if out, err := h.Result(ctxT(t)); err != nil || out != "decided by alice" {
		t.Fatalf("result %q %v", out, err)
	}
}
