package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
)

// chromium finds Debian's chromium. Without it the browser tests fail under
// CI=true (CI installs it) and are skipped, saying why, elsewhere.
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("chromium is not installed: the browser tests need it (apt-get install -y chromium)")
	}
	t.Skip("skipping the browser tests: chromium is not installed (apt-get install -y chromium)")
	return ""
}

// browser starts a headless chromium for the test and returns a tab's context.
func browser(t *testing.T) context.Context {
	t.Helper()
	exe := chromium(t)
	// The profile is not a t.TempDir: chromium's helper processes may still
	// write to it for a moment after the browser is stopped, and TempDir's
	// cleanup fails the test on a directory that is not empty yet.
	profile, err := os.MkdirTemp("", "trellis-ui-browser-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for range 50 {
			if os.RemoveAll(profile) == nil {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Logf("leaving chromium's profile %s", profile)
	})
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.NoSandbox, chromedp.WindowSize(1360, 900),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(profile))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelB := chromedp.NewContext(actx)
	ctx, cancelT := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() { cancelT(); cancelB(); cancelA() })
	// Accept the confirmations of cancel and reset.
	// and fail on a script error.
	var mu sync.Mutex
	var thrown []string
	chromedp.ListenTarget(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *page.EventJavascriptDialogOpening:
			go chromedp.Run(ctx, page.HandleJavaScriptDialog(true))
		case *runtime.EventExceptionThrown:
			mu.Lock()
			thrown = append(thrown, ev.ExceptionDetails.Error())
			mu.Unlock()
		}
	})
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range thrown {
			t.Errorf("script error in the page: %s", e)
		}
	})
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

func run(t *testing.T, ctx context.Context, actions ...chromedp.Action) {
	t.Helper()
	if err := chromedp.Run(ctx, actions...); err != nil {
		t.Fatal(err)
	}
}

// signIn signs in through the form, as a user does, and returns the path of
// the page it lands on.
func signIn(t *testing.T, ctx context.Context, base, token string) string {
	t.Helper()
	var landed string
	run(t, ctx,
		network.ClearBrowserCookies(),
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible("#token", chromedp.ByID),
		chromedp.SendKeys("#token", token, chromedp.ByID),
		chromedp.Click("#signin", chromedp.ByID),
		chromedp.WaitVisible("#nav", chromedp.ByID),
		chromedp.Evaluate(`location.pathname + location.search`, &landed),
	)
	return landed
}

// shipOrder is a workflow with something to show: steps, a retried step, a
// sleep, stored values and an approval.
var (
	chargeTries atomic.Int32
	shipOrderWF = trellis.NewWorkflow("ship-order", func(wc *trellis.Context, in map[string]any) (string, error) {
		pause := func(d time.Duration) func(ctx context.Context) (string, error) {
			return func(ctx context.Context) (string, error) { time.Sleep(d); return "ok", nil }
		}
		if _, err := trellis.Step(wc, "validate", pause(40*time.Millisecond)); err != nil {
			return "", err
		}
		if err := wc.Set("order", in); err != nil {
			return "", err
		}
		_, err := trellis.Step(wc, "charge-card", func(ctx context.Context) (string, error) {
			time.Sleep(60 * time.Millisecond)
			if chargeTries.Add(1)%3 != 0 {
				return "", errors.New("card network timeout")
			}
			return "ch_123", nil
		}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 5, Backoff: trellis.Fixed(80 * time.Millisecond)}})
		if err != nil {
			return "", err
		}
		if err := wc.Set("charge", "ch_123"); err != nil {
			return "", err
		}
		if err := wc.Sleep(200 * time.Millisecond); err != nil {
			return "", err
		}
		d, err := trellis.Approval(wc, "ship", trellis.ApprovalOptions{Subject: "ship order " + in["order"].(string)})
		if err != nil {
			return "", err
		}
		if _, err := trellis.Step(wc, "print-label", pause(90*time.Millisecond)); err != nil {
			return "", err
		}
		return "shipped, approved by " + d.Principal, nil
	})
)

// The web UI in a real browser: sign in, find a run, watch it advance live,
// approve a request, cancel a run; a reader sees no buttons and cannot approve
// through the API either.
func TestUIInBrowser(t *testing.T) {
	ctx := browser(t)
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	if err := e.worker.Register(context.Background(), shipOrderWF); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		e.waitRun(e.start("echo", map[string]any{"n": i}, nil).ID)
	}

	// Sign in, then find a waiting run by filtering.
	if landed := signIn(t, ctx, e.base, "admin"); landed != "/ui/default/runs" {
		t.Fatalf("admin landed on %s", landed)
	}
	waiting := e.start("await-go", nil, nil)
	e.until(waiting.ID, func() bool {
		r, _ := e.worker.Get(context.Background(), waiting.ID)
		return r.Status == trellis.StatusWaiting
	})
	var principal string
	run(t, ctx,
		chromedp.Text("#principal", &principal, chromedp.ByID),
		chromedp.SetValue("#f-workflow", "await-go", chromedp.ByID),
		chromedp.Click("#f-apply", chromedp.ByID),
		chromedp.WaitVisible(`tr[data-run="`+waiting.ID+`"]`, chromedp.ByQuery),
	)
	if principal != "root" {
		t.Fatalf("signed in as %q", principal)
	}
	var rows int
	run(t, ctx, chromedp.Evaluate(`document.querySelectorAll("#runs tbody tr[data-run]").length`, &rows))
	if rows != 1 {
		t.Fatalf("filter on workflow await-go shows %d runs", rows)
	}

	// The runs page updates live: a run started now appears without a reload.
	run(t, ctx, chromedp.Navigate(e.base+"/ui/default/runs"), chromedp.WaitVisible("#runs", chromedp.ByID),
		chromedp.Evaluate(`window.__notReloaded = true`, nil))
	fresh := e.start("await-go", nil, nil)
	var same bool
	run(t, ctx, chromedp.WaitVisible(`tr[data-run="`+fresh.ID+`"]`, chromedp.ByQuery),
		chromedp.Evaluate(`window.__notReloaded === true`, &same))
	if !same {
		t.Fatal("the runs page reloaded instead of updating")
	}

	// Watch a run advance live: it waits for an event; send it; the page shows it succeeded.
	run(t, ctx, chromedp.Evaluate(`document.querySelector('tr[data-run="`+waiting.ID+`"] a').click()`, nil),
		chromedp.WaitVisible("#wait-reason", chromedp.ByID),
		chromedp.Evaluate(`window.__notReloaded = true`, nil))
	e.do("POST", "/v1/namespaces/default/runs/"+waiting.ID+"/events", "producer", map[string]any{"name": "go", "payload": "done"}).want(t, 204)
	var result string
	run(t, ctx, chromedp.WaitVisible(".runhead .st-succeeded", chromedp.ByQuery),
		chromedp.Text("#run-result", &result, chromedp.ByID),
		chromedp.Evaluate(`window.__notReloaded === true`, &same))
	if !same || !strings.Contains(result, "done") {
		t.Fatalf("live update: not reloaded %v, result %q", same, result)
	}
	if findRoute("GET", nsRuns+"/{id}/stream") != nil {
		// Where the API streams, the page lists the run's events as they come.
		run(t, ctx, chromedp.WaitVisible(`#events li[data-event="run.succeeded"]`, chromedp.ByQuery))
	}

	// Approve a request with a comment: recorded as the signed-in principal.
	order := e.start("ship-order", map[string]any{"order": "A-1001", "items": 3}, nil)
	approval := e.pendingApproval(order.ID)
	run(t, ctx, chromedp.Navigate(e.base+"/ui/default/approvals"),
		chromedp.WaitVisible(`[data-approval="`+approval+`"] .comment`, chromedp.ByQuery),
		chromedp.SendKeys(`[data-approval="`+approval+`"] .comment`, "looks good", chromedp.ByQuery))
	screenshot(t, ctx, "ui-approvals.png")
	run(t, ctx,
		chromedp.Click(`[data-approval="`+approval+`"] button[name=approve]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#decided tr[data-approval="`+approval+`"]`, chromedp.ByQuery),
	)
	done := e.waitRun(order.ID)
	var out string
	if done.Status != trellis.StatusSucceeded || json.Unmarshal(done.Output, &out) != nil || out != "shipped, approved by root" {
		t.Fatalf("approved run: %s %s", done.Status, done.Output)
	}
	a, err := e.worker.GetApproval(context.Background(), approval)
	if err != nil || a.Principal != "root" || a.Comment != "looks good" {
		t.Fatalf("approval: %+v %v", a, err)
	}

	// The run page of the finished order: a timeline with the retried step.
	var failures int
	run(t, ctx, chromedp.Navigate(e.base+"/ui/default/runs/"+order.ID),
		chromedp.WaitVisible(`#timeline tr[data-op="charge-card"]`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll('#timeline tr[data-op="charge-card"] rect.fail').length`, &failures))
	if failures != 2 {
		t.Fatalf("charge-card shows %d failed attempts, want 2", failures)
	}
	// Claims (the run was taken after its sleep and its approval too) apart
	// from its steps' attempts: validate 1, charge-card 3, print-label 1.
	var claims, stepAttempts string
	run(t, ctx, chromedp.Text("#claims", &claims, chromedp.ByID), chromedp.Text("#step-attempts", &stepAttempts, chromedp.ByID))
	if claims != fmt.Sprint(done.Attempts) || stepAttempts != "5 (2 failed) over 3 steps" {
		t.Fatalf("claims %q (the run's %d), step attempts %q", claims, done.Attempts, stepAttempts)
	}
	screenshot(t, ctx, "ui-run.png")
	run(t, ctx, chromedp.Navigate(e.base+"/ui/default/runs"), chromedp.WaitVisible("#runs", chromedp.ByID))
	screenshot(t, ctx, "ui-runs.png")

	run(t, ctx, chromedp.Navigate(e.base+"/ui/default/workers"), chromedp.WaitVisible("#workers", chromedp.ByID))
	screenshot(t, ctx, "ui-workers.png")

	// Pause a queue from the queues page: it shows paused, and the store says so.
	walkQueue(t, e)
	run(t, ctx, chromedp.Navigate(e.base+"/ui/default/queues"),
		chromedp.WaitVisible(`tr[data-queue="walk-q"] .pause-queue`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelector('tr[data-queue="walk-q"] .pause-queue').click()`, nil),
		chromedp.WaitVisible(`tr[data-queue="walk-q"] .resume-queue`, chromedp.ByQuery))
	if q, err := e.st.QueueGet(context.Background(), &store.QueueGetParams{Namespace: "default", Name: "walk-q"}); err != nil || !q.Paused {
		t.Fatalf("queue paused from the page: %+v %v", q, err)
	}
	screenshot(t, ctx, "ui-queues.png")

	// Cancel a run from its page.
	victim := e.start("await-go", nil, nil)
	run(t, ctx, chromedp.Navigate(e.base+"/ui/default/runs/"+victim.ID),
		chromedp.WaitVisible("#cancel", chromedp.ByID),
		// Clicked by script: the page refreshes itself, and a node found before
		// the refresh may be gone by the time a mouse click reaches it.
		chromedp.Evaluate(`document.getElementById("cancel").click()`, nil),
		chromedp.WaitVisible(".runhead .st-cancelled", chromedp.ByQuery))
	if r := e.waitRun(victim.ID); r.Status != trellis.StatusCancelled {
		t.Fatalf("cancelled run is %s", r.Status)
	}

	// An approver without the reader role (the 3 a.m. approver) signs in and
	// lands on the approvals, not on a page it may not open; its navigation
	// has no Runs, the request's run is text, not a link; it approves.
	pending := e.start("needs-anyone", nil, nil)
	reqID := e.pendingApproval(pending.ID)
	asApprover := e.start("needs-anyone", nil, nil)
	approverReq := e.pendingApproval(asApprover.ID)
	if landed := signIn(t, ctx, e.base, "approver"); landed != "/ui/default/approvals" {
		t.Fatalf("the approver landed on %s", landed)
	}
	var nav []string
	var runLinks, runTexts int
	run(t, ctx, chromedp.WaitVisible(`[data-approval="`+approverReq+`"] button[name=approve]`, chromedp.ByQuery),
		chromedp.Evaluate(`Array.from(document.querySelectorAll("#nav a")).map(a => a.dataset.nav)`, &nav),
		chromedp.Evaluate(`document.querySelectorAll('main a[href*="/runs/"]').length`, &runLinks),
		chromedp.Evaluate(`document.querySelectorAll('[data-approval="`+approverReq+`"] [data-run="`+asApprover.ID+`"]').length`, &runTexts))
	if fmt.Sprint(nav) != "[approvals]" || runLinks != 0 || runTexts != 1 {
		t.Fatalf("the approver's approvals page: nav %v, %d links to runs, run as text %d times", nav, runLinks, runTexts)
	}
	run(t, ctx, chromedp.SendKeys(`[data-approval="`+approverReq+`"] .comment`, "approved at 3 a.m.", chromedp.ByQuery))
	screenshot(t, ctx, "ui-approvals-approver.png")
	run(t, ctx,
		chromedp.Click(`[data-approval="`+approverReq+`"] button[name=approve]`, chromedp.ByQuery),
		chromedp.WaitVisible(`#decided tr[data-approval="`+approverReq+`"]`, chromedp.ByQuery))
	if a, err := e.worker.GetApproval(context.Background(), approverReq); err != nil || a.Status != trellis.ApprovalApproved ||
		a.Principal != "approver" || a.Comment != "approved at 3 a.m." {
		t.Fatalf("the approver's approval: %+v %v", a, err)
	}

	// A reader sees the runs and the requests but no button, and the API
	// refuses its approval.
	if landed := signIn(t, ctx, e.base, "reader"); landed != "/ui/default/runs" {
		t.Fatalf("the reader landed on %s", landed)
	}
	var buttons int
	run(t, ctx, chromedp.Navigate(e.base+"/ui/default/approvals"),
		chromedp.WaitVisible(`[data-approval="`+reqID+`"]`, chromedp.ByQuery),
		chromedp.Evaluate(`document.querySelectorAll("main button, main form[method=post]").length`, &buttons))
	if buttons != 0 {
		t.Fatalf("reader sees %d buttons on the approvals page", buttons)
	}
	run(t, ctx, chromedp.Navigate(e.base+"/ui/default/runs/"+pending.ID),
		chromedp.WaitVisible("#timeline", chromedp.ByID),
		chromedp.Evaluate(`document.querySelectorAll("main button, main form[method=post]").length`, &buttons))
	if buttons != 0 {
		t.Fatalf("reader sees %d buttons on a run page", buttons)
	}
	e.do("POST", "/v1/namespaces/default/approvals/"+reqID+"/approve", "reader", map[string]any{}).problem(t, 403, "permission_denied")
	if a, err := e.worker.GetApproval(context.Background(), reqID); err != nil || a.Status != trellis.ApprovalPending {
		t.Fatalf("after the reader's refused approval: %+v %v", a, err)
	}
}

// screenshot saves the page to $TRELLIS_SCREENSHOTS (default the test's temp
// directory).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	dir := os.Getenv("TRELLIS_SCREENSHOTS")
	if dir == "" {
		dir = t.TempDir()
	}
	var png []byte
	run(t, ctx, chromedp.FullScreenshot(&png, 100))
	if err := os.WriteFile(filepath.Join(dir, name), png, 0o644); err != nil {
		t.Fatal(err)
	}
}
