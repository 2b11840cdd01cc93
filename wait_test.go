package trellis_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

func opKinds(t *testing.T, c *trellis.Client, ref string) []string {
	t.Helper()
	var kinds []string
	for _, op := range must[[]*trellis.Op](t)(c.History(ctxT(t), ref)) {
		kinds = append(kinds, fmt.Sprintf("%s:%v", op.Kind, op.Done))
	}
	return kinds
}

func TestSleepReleasesTheRunAndResumes(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("sleeper", func(wc *trellis.Context, d time.Duration) (string, error) {
		if err := wc.Sleep(d); err != nil {
			return "", err
		}
		return trellis.Step(wc, "after", func(context.Context) (string, error) { return "woke", nil })
	})
	c := setup(t, wf)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, 300*time.Millisecond))
	run := waitStatus(t, c, h.RunID(), trellis.StatusWaiting)
	if !strings.HasPrefix(run.WaitReason, "sleeping until ") || run.LeaseOwner != "" {
		t.Fatalf("sleeping run = reason %q, lease owner %q", run.WaitReason, run.LeaseOwner)
	}
	if got := mustResult(t, h); got != "woke" {
		t.Fatalf("result %q", got)
	}
	if got := opKinds(t, c, h.RunID()); !slices.Equal(got, []string{"timer:true", "step:true"}) {
		t.Fatalf("history %v, want a fired timer then the step", got)
	}
}

func TestShortSleepWaitsInPlace(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("short-sleep", func(wc *trellis.Context, _ int) (int, error) {
		return 1, wc.Sleep(5 * time.Millisecond) // below MaxInlineBackoff (20ms in tests)
	})
	c := setup(t, wf)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 0))
	mustResult(t, h)
	if run := must[*trellis.Run](t)(c.Get(ctxT(t), h.RunID())); run.Attempts != 1 {
		t.Fatalf("attempts = %d, want 1 (no release)", run.Attempts)
	}
}

func TestEventsAreDeliveredOnceInOrder(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("inbox", func(wc *trellis.Context, n int) ([]int, error) {
		var got []int
		for range n {
			v, err := trellis.WaitEvent[int](wc, "item", 0)
			if err != nil {
				return nil, err
			}
			got = append(got, v)
			// A step between events: the next wait replays the history so far.
			if _, err := trellis.Step(wc, fmt.Sprint("ack-", v), func(context.Context) (int, error) { return v, nil }); err != nil {
				return nil, err
			}
		}
		return got, nil
	})
	c := setup(t, wf)
	h := must[*trellis.Handle[[]int]](t)(trellis.Start(ctxT(t), c, wf, 4))
	// Two events before the run waits, two while it waits.
	for _, v := range []int{1, 2} {
		if err := c.SendEvent(ctxT(t), h.RunID(), "item", v); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.SendEvent(ctxT(t), h.RunID(), "other", 99); err != nil {
		t.Fatal(err)
	}
	run := waitStatus(t, c, h.RunID(), trellis.StatusWaiting)
	if !strings.Contains(run.WaitReason, `event "item"`) {
		t.Fatalf("wait reason %q", run.WaitReason)
	}
	for _, v := range []int{3, 4} {
		if err := c.SendEvent(ctxT(t), h.ID(), "item", v); err != nil { // by workflow ID too
			t.Fatal(err)
		}
	}
	if got := mustResult(t, h); !slices.Equal(got, []int{1, 2, 3, 4}) {
		t.Fatalf("events %v, want [1 2 3 4]", got)
	}
}

func TestWaitEventTimesOut(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("event-timeout", func(wc *trellis.Context, _ int) (string, error) {
		_, err := trellis.WaitEvent[string](wc, "never", 100*time.Millisecond)
		if !errors.Is(err, trellis.ErrEventTimeout) {
			return "", fmt.Errorf("want a timeout, got %v", err)
		}
		return "timed out", nil
	})
	c := setup(t, wf)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, 0))
	if got := mustResult(t, h); got != "timed out" {
		t.Fatalf("result %q", got)
	}
}

func TestSendEventBadInput(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("event-done", func(wc *trellis.Context, _ int) (int, error) { return 1, nil })
	c := setup(t, wf)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 0))
	mustResult(t, h)
	for _, tc := range []struct {
		ref, name string
		want      error
	}{
		{"no-such-run", "x", trellis.ErrRunNotFound},
		{h.RunID(), "x", trellis.ErrRunFinished},
		{h.RunID(), "", trellis.ErrInvalidParams},
		{"no-such-run", "trellis.approval.x", trellis.ErrInvalidParams}, // the store's own names
	} {
		if err := c.SendEvent(ctxT(t), tc.ref, tc.name, 1); !errors.Is(err, tc.want) {
			t.Errorf("SendEvent(%q, %q) = %v, want %v", tc.ref, tc.name, err, tc.want)
		}
	}
	if err := c.SendEvent(ctxT(t), h.RunID(), "x", strings.Repeat("x", trellis.DefaultMaxPayloadBytes)); !errors.Is(err, trellis.ErrPayloadTooLarge) {
		t.Errorf("oversized event: %v", err)
	}
}

func TestApprovalDecisionIsRecorded(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("refund", func(wc *trellis.Context, amount int) (string, error) {
		d, err := trellis.Approval(wc, "refund-over-1000", trellis.ApprovalOptions{
			Approvers: []string{"finance"}, Subject: fmt.Sprintf("refund %d", amount), Details: map[string]int{"amount": amount},
		})
		if err != nil {
			return "", err
		}
		if !d.Approved {
			return "rejected by " + d.Principal, nil
		}
		return "approved by " + d.Principal + ": " + d.Comment, nil
	})
	c := setup(t, wf)
	for _, approve := range []bool{true, false} {
		h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, 1500))
		run := waitStatus(t, c, h.RunID(), trellis.StatusWaiting)
		if !strings.Contains(run.WaitReason, "refund-over-1000") {
			t.Fatalf("wait reason %q", run.WaitReason)
		}
		page := must[*trellis.ApprovalList](t)(c.Approvals(ctxT(t), trellis.ApprovalFilter{Run: h.RunID(), Statuses: []trellis.ApprovalStatus{trellis.ApprovalPending}}))
		if len(page.Approvals) != 1 {
			t.Fatalf("pending approvals %+v", page.Approvals)
		}
		a := page.Approvals[0]
		if a.Name != "refund-over-1000" || a.Subject != "refund 1500" || !slices.Equal(a.Approvers, []string{"finance"}) || string(a.Details) != `{"amount":1500}` {
			t.Fatalf("approval %+v", a)
		}
		var want string
		if approve {
			must[*trellis.ApprovalRecord](t)(c.Approve(ctxT(t), a.ID, "alice", "within policy"))
			want = "approved by alice: within policy"
		} else {
			must[*trellis.ApprovalRecord](t)(c.Reject(ctxT(t), a.ID, "bob", ""))
			want = "rejected by bob"
		}
		if got := mustResult(t, h); got != want {
			t.Fatalf("result %q, want %q", got, want)
		}
		if _, err := c.Approve(ctxT(t), a.ID, "mallory", ""); !errors.Is(err, trellis.ErrApprovalDecided) {
			t.Fatalf("second decision: %v", err)
		}
		hist := must[[]*trellis.Op](t)(c.History(ctxT(t), h.RunID()))
		if len(hist) != 1 || hist[0].Kind != "approval" || !strings.Contains(string(hist[0].Result), `"principal"`) {
			t.Fatalf("history %+v", hist)
		}
	}
	if _, err := c.Approve(ctxT(t), "no-such-approval", "alice", ""); !errors.Is(err, trellis.ErrApprovalNotFound) {
		t.Fatalf("unknown approval: %v", err)
	}
}

func TestApprovalTimesOut(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("approval-timeout", func(wc *trellis.Context, _ int) (string, error) {
		_, err := trellis.Approval(wc, "sign-off", trellis.ApprovalOptions{Timeout: 100 * time.Millisecond})
		if errors.Is(err, trellis.ErrApprovalTimeout) {
			return "escalated", nil
		}
		return "", err
	})
	c := setup(t, wf)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, 0))
	if got := mustResult(t, h); got != "escalated" {
		t.Fatalf("result %q", got)
	}
	page := must[*trellis.ApprovalList](t)(c.Approvals(ctxT(t), trellis.ApprovalFilter{Run: h.RunID()}))
	if len(page.Approvals) != 1 || page.Approvals[0].Status != trellis.ApprovalExpired {
		t.Fatalf("approvals %+v, want one expired", page.Approvals)
	}
}

// Approve within a time, or escalate: Select over an approval and a timer.
func TestSelectApprovalOrTimer(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("approve-or-escalate", func(wc *trellis.Context, wait time.Duration) (string, error) {
		approval := trellis.RequestApproval(wc, "ok", trellis.ApprovalOptions{})
		timer := wc.NewTimer(wait)
		i, err := trellis.Select(wc, approval, timer)
		if err != nil {
			return "", err
		}
		if i == 1 {
			return "escalated", nil
		}
		d, err := approval.Get(wc)
		return fmt.Sprint("approved=", d.Approved), err
	})
	c := setup(t, wf)
	fast := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, time.Hour))
	waitStatus(t, c, fast.RunID(), trellis.StatusWaiting)
	page := must[*trellis.ApprovalList](t)(c.Approvals(ctxT(t), trellis.ApprovalFilter{Run: fast.RunID()}))
	must[*trellis.ApprovalRecord](t)(c.Approve(ctxT(t), page.Approvals[0].ID, "alice", ""))
	if got := mustResult(t, fast); got != "approved=true" {
		t.Fatalf("approved in time: %q", got)
	}
	slow := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, 100*time.Millisecond))
	if got := mustResult(t, slow); got != "escalated" {
		t.Fatalf("no decision: %q", got)
	}
}

func TestChildRuns(t *testing.T) {
	t.Parallel()
	double := trellis.NewWorkflow("double", func(wc *trellis.Context, n int) (int, error) {
		if n < 0 {
			return 0, trellis.NonRetryable(errors.New("negative"))
		}
		return trellis.Step(wc, "x2", func(context.Context) (int, error) { return 2 * n, nil })
	})
	parent := trellis.NewWorkflow("parent", func(wc *trellis.Context, n int) (string, error) {
		v, err := trellis.Child(wc, double, n)
		var ce *trellis.ChildError
		if errors.As(err, &ce) {
			return fmt.Sprintf("child %s %s: %s", ce.RunID, ce.Status, ce.Message), nil
		}
		return fmt.Sprint(v), err
	})
	c := setup(t, double, parent)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, parent, 21))
	if got := mustResult(t, h); got != "42" {
		t.Fatalf("result %q", got)
	}
	child := must[*trellis.Run](t)(c.Get(ctxT(t), h.RunID()+".0"))
	if child.ParentID != h.RunID() || child.Status != trellis.StatusSucceeded {
		t.Fatalf("child run %+v", child)
	}
	h = must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, parent, -1))
	if got := mustResult(t, h); got != fmt.Sprintf("child %s.0 failed: negative", h.RunID()) {
		t.Fatalf("failed child: %q", got)
	}
}

func TestDetachedChildOutlivesParent(t *testing.T) {
	t.Parallel()
	gate := make(chan struct{})
	slow := trellis.NewWorkflow("slow-child", func(wc *trellis.Context, _ int) (int, error) {
		return trellis.Step(wc, "wait", func(context.Context) (int, error) { <-gate; return 7, nil })
	})
	parent := trellis.NewWorkflow("detaching-parent", func(wc *trellis.Context, _ int) (string, error) {
		f := trellis.ChildAsync(wc, slow, 0, trellis.ChildOptions{Detached: true, ID: "detached-" + wc.RunID()})
		if _, err := f.Get(wc); !errors.Is(err, trellis.ErrDetachedChild) {
			return "", fmt.Errorf("Get on a detached child: %v", err)
		}
		return f.RunID(), nil
	})
	c := setup(t, slow, parent)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, parent, 0))
	childID := mustResult(t, h) // the child exists once the parent finished
	waitStatus(t, c, childID, trellis.StatusRunning)
	close(gate)
	if run := waitStatus(t, c, "detached-"+h.RunID(), trellis.StatusSucceeded); run.ID != childID {
		t.Fatalf("child by workflow ID = %s, want %s", run.ID, childID)
	}
}

func TestCancellingAParentCancelsItsChildren(t *testing.T) {
	t.Parallel()
	waiter := trellis.NewWorkflow("waits-forever", func(wc *trellis.Context, _ int) (int, error) {
		return trellis.WaitEvent[int](wc, "never", 0)
	})
	parent := trellis.NewWorkflow("cancelled-parent", func(wc *trellis.Context, _ int) (int, error) {
		return trellis.Child(wc, waiter, 0)
	})
	c := setup(t, waiter, parent)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, parent, 0))
	childID := h.RunID() + ".0"
	parentRun := waitStatus(t, c, h.RunID(), trellis.StatusWaiting) // the child exists once the parent waits
	if want := "waiting for child run " + childID; parentRun.WaitReason != want {
		t.Fatalf("parent wait reason %q, want %q", parentRun.WaitReason, want)
	}
	waitStatus(t, c, childID, trellis.StatusWaiting)
	if err := c.Cancel(ctxT(t), h.RunID()); err != nil {
		t.Fatal(err)
	}
	waitStatus(t, c, h.RunID(), trellis.StatusCancelled)
	waitStatus(t, c, childID, trellis.StatusCancelled)
}

func TestMapRunsItemsAsChildren(t *testing.T) {
	t.Parallel()
	square := trellis.NewWorkflow("square", func(wc *trellis.Context, n int) (int, error) {
		if n == 13 {
			return 0, trellis.NonRetryable(errors.New("unlucky"))
		}
		return trellis.Step(wc, "sq", func(context.Context) (int, error) { return n * n, nil })
	})
	type req struct {
		Items   []int
		Collect bool
	}
	sum := trellis.NewWorkflow("sum-squares", func(wc *trellis.Context, r req) ([]int, error) {
		return trellis.Map(wc, square, r.Items, trellis.MapOptions{MaxConcurrency: 7, CollectErrors: r.Collect})
	})
	c := setup(t, square, sum)
	items := make([]int, 120)
	for i := range items {
		items[i] = i + 20
	}
	h := must[*trellis.Handle[[]int]](t)(trellis.Start(ctxT(t), c, sum, req{Items: items}))
	got := mustResult(t, h)
	for i, v := range got {
		if v != items[i]*items[i] {
			t.Fatalf("result[%d] = %d, want %d", i, v, items[i]*items[i])
		}
	}
	if kinds := opKinds(t, c, h.RunID()); !slices.Equal(kinds, []string{"child:true"}) {
		t.Fatalf("parent history %v, want one child op", kinds)
	}

	// Fail fast: the failure of item 2 ends the map.
	h = must[*trellis.Handle[[]int]](t)(trellis.Start(ctxT(t), c, sum, req{Items: []int{1, 2, 13, 4}}))
	_, err := h.Result(ctxT(t))
	if err == nil || !strings.Contains(err.Error(), "item 2") || !strings.Contains(err.Error(), "unlucky") {
		t.Fatalf("fail-fast map: %v", err)
	}
	// Collect errors: every item runs.
	h = must[*trellis.Handle[[]int]](t)(trellis.Start(ctxT(t), c, sum, req{Items: []int{1, 13, 3}, Collect: true}))
	_, err = h.Result(ctxT(t))
	if err == nil || !strings.Contains(err.Error(), "item 1") {
		t.Fatalf("collecting map: %v", err)
	}
	for i, want := range []trellis.Status{trellis.StatusSucceeded, trellis.StatusFailed, trellis.StatusSucceeded} {
		waitStatus(t, c, fmt.Sprintf("%s.0.%d", h.RunID(), i), want)
	}
}

// A run that ends while one of its approval requests is open expires it: nobody
// can decide for a finished run.
func TestOpenApprovalsExpireWithTheRun(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("abandons-approval", func(wc *trellis.Context, _ int) (string, error) {
		a := trellis.RequestApproval(wc, "maybe", trellis.ApprovalOptions{})
		if i, err := trellis.Select(wc, a, wc.NewTimer(50*time.Millisecond)); err != nil || i != 1 {
			return "", fmt.Errorf("select = %d, %v", i, err)
		}
		return "gave up", nil
	})
	c := setup(t, wf)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, 0))
	mustResult(t, h)
	page := must[*trellis.ApprovalList](t)(c.Approvals(ctxT(t), trellis.ApprovalFilter{Run: h.RunID()}))
	if len(page.Approvals) != 1 || page.Approvals[0].Status != trellis.ApprovalExpired {
		t.Fatalf("approvals %+v, want one expired", page.Approvals)
	}
}

// Select over the other kinds of futures: a step, an event and a child each win
// against an hour's timer, and the recorded choice survives the replays that
// follow (the run is released and reclaimed between the cases).
func TestSelectStepEventChild(t *testing.T) {
	t.Parallel()
	child := trellis.NewWorkflow("select-child", func(wc *trellis.Context, n int) (int, error) { return n + 1, nil })
	wf := trellis.NewWorkflow("select-kinds", func(wc *trellis.Context, _ int) ([]int, error) {
		var won []int
		step := trellis.Async(wc, "quick", func(context.Context) (int, error) { return 1, nil })
		i, err := trellis.Select(wc, wc.NewTimer(time.Hour), step)
		if err != nil {
			return nil, err
		}
		won = append(won, i)
		ev := trellis.OnEvent[int](wc, "go", 0)
		if i, err = trellis.Select(wc, wc.NewTimer(time.Hour), ev); err != nil {
			return nil, err
		}
		v, err := ev.Get(wc)
		if err != nil {
			return nil, err
		}
		won = append(won, i, v)
		ch := trellis.ChildAsync(wc, child, 41)
		if i, err = trellis.Select(wc, wc.NewTimer(time.Hour), ch); err != nil {
			return nil, err
		}
		r, err := ch.Get(wc)
		return append(won, i, r), err
	})
	c := setup(t, child, wf)
	h := must[*trellis.Handle[[]int]](t)(trellis.Start(ctxT(t), c, wf, 0))
	waitStatus(t, c, h.RunID(), trellis.StatusWaiting)
	if err := c.SendEvent(ctxT(t), h.RunID(), "go", 7); err != nil {
		t.Fatal(err)
	}
	if got := mustResult(t, h); !slices.Equal(got, []int{1, 1, 7, 1, 42}) {
		t.Fatalf("select results %v, want [1 1 7 1 42]", got)
	}
	var selects []string
	for _, op := range must[[]*trellis.Op](t)(c.History(ctxT(t), h.RunID())) {
		if op.Kind == "select" {
			selects = append(selects, string(op.Result))
		}
	}
	if !slices.Equal(selects, []string{"1", "1", "1"}) {
		t.Fatalf("recorded choices %v", selects)
	}
}
