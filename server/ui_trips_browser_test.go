package server

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
)

// The daily trips of the web UI in a real browser: the schedules page (a bad
// cron refused with the reason, a schedule created, paused, triggered), an
// event sent from a run's page (bad JSON refused, then sent; the page follows
// the run), the search by workflow ID and by an unknown ID, the namespace
// switcher, wait reasons that wrap between words, and an approver without the
// reader role deciding from the request's own page.
func TestUIDailyTripsInBrowser(t *testing.T) {
	ctx := browser(t)
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	bg := context.Background()
	if _, err := e.st.NamespaceCreate(bg, &store.NamespaceCreateParams{Name: "billing"}); err != nil {
		t.Fatal(err)
	}
	if landed := signIn(t, ctx, e.base, "admin"); landed != "/ui/default/runs" {
		t.Fatalf("admin landed on %s", landed)
	}

	// Schedules: from the navigation; a bad cron is refused with the reason
	// and the form keeps what was typed; fixed, the schedule is created.
	var kept, msg string
	run(t, ctx,
		chromedp.Click(`#nav a[data-nav="schedules"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#no-schedules", chromedp.ByID),
		chromedp.SendKeys("#s-name", "nightly-report", chromedp.ByID),
		chromedp.SendKeys("#s-workflow", "echo", chromedp.ByID),
		chromedp.SendKeys("#s-cron", "61 3 * * *", chromedp.ByID),
		chromedp.SetValue("#s-tz", "Europe/Berlin", chromedp.ByID),
		chromedp.SendKeys("#s-input", `{"report": "daily"}`, chromedp.ByID),
		chromedp.Click("#s-create", chromedp.ByID),
		chromedp.WaitVisible("#schedule-form-error", chromedp.ByID),
		chromedp.Text("#schedule-form-error", &msg, chromedp.ByID),
		chromedp.Value("#s-name", &kept, chromedp.ByID))
	if !strings.Contains(msg, "61 3 * * *") || kept != "nightly-report" {
		t.Fatalf("a bad cron: message %q, name kept %q", msg, kept)
	}
	if list, _ := e.worker.ListSchedules(bg); len(list) != 0 {
		t.Fatalf("a refused form created %d schedules", len(list))
	}
	screenshot(t, ctx, "ui-schedules-refused.png")
	run(t, ctx,
		chromedp.SetValue("#s-cron", "*/5 * * * *", chromedp.ByID),
		chromedp.Click("#s-create", chromedp.ByID),
		chromedp.WaitVisible(`tr[data-schedule="nightly-report"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#schedule-notice", chromedp.ByID))
	sc, err := e.worker.GetSchedule(bg, "nightly-report")
	if err != nil || sc.Spec.Cron != "*/5 * * * *" || sc.Spec.TimeZone != "Europe/Berlin" || string(sc.Spec.Input) != `{"report": "daily"}` {
		t.Fatalf("the schedule created in the browser: %+v %v", sc, err)
	}
	// Pause, then trigger now: a run starts, linked from the notice.
	run(t, ctx,
		chromedp.Click(`tr[data-schedule="nightly-report"] .pause-schedule`, chromedp.ByQuery),
		chromedp.WaitVisible(`tr[data-schedule="nightly-report"] .resume-schedule`, chromedp.ByQuery),
		chromedp.Click(`tr[data-schedule="nightly-report"] .trigger-schedule`, chromedp.ByQuery),
		chromedp.WaitVisible(`#schedule-notice a`, chromedp.ByQuery))
	if sc, _ := e.worker.GetSchedule(bg, "nightly-report"); !sc.Paused || sc.LastRunID == "" {
		t.Fatalf("after pause and trigger: paused %v, last run %q", sc.Paused, sc.LastRunID)
	}
	if _, err := e.worker.CreateSchedule(bg, "hourly-cleanup", trellis.ScheduleSpec{Workflow: "echo", Cron: "@hourly"}); err != nil {
		t.Fatal(err)
	}
	run(t, ctx, chromedp.Navigate(e.base+"/ui/default/schedules"), chromedp.WaitVisible(`tr[data-schedule="hourly-cleanup"]`, chromedp.ByQuery))
	screenshot(t, ctx, "ui-schedules.png")

	// An event from the run's page: bad JSON is refused with the reason, and
	// the page still follows the run; then the event is sent and the run ends.
	waiting := e.start("await-go", nil, map[string]any{"id": "order-7781"})
	e.until(waiting.ID, func() bool {
		r, _ := e.worker.Get(bg, waiting.ID)
		return r.Status == trellis.StatusWaiting
	})
	// Found by its workflow ID from the navigation's search box.
	var path string
	run(t, ctx,
		chromedp.SetValue("#search-id", "order-7781", chromedp.ByID),
		chromedp.Submit("#search-id", chromedp.ByID),
		chromedp.WaitVisible("#event-card", chromedp.ByID),
		chromedp.Evaluate(`location.pathname`, &path))
	if path != "/ui/default/runs/"+waiting.ID {
		t.Fatalf("the search for order-7781 went to %s", path)
	}
	run(t, ctx,
		chromedp.SendKeys("#event-name", "go", chromedp.ByID),
		chromedp.SendKeys("#event-payload", `shipped`, chromedp.ByID), // a string without its quotes
		chromedp.Click("#event-send", chromedp.ByID),
		chromedp.WaitVisible("#event-error", chromedp.ByID),
		chromedp.Text("#event-error", &msg, chromedp.ByID))
	if !strings.Contains(msg, "not JSON") {
		t.Fatalf("bad JSON: %q", msg)
	}
	screenshot(t, ctx, "ui-run-event-refused.png")
	run(t, ctx,
		chromedp.SetValue("#event-payload", `"shipped"`, chromedp.ByID),
		chromedp.Click("#event-send", chromedp.ByID),
		chromedp.WaitVisible("#event-sent", chromedp.ByID),
		chromedp.WaitVisible(".runhead .st-succeeded", chromedp.ByQuery))
	if r := e.waitRun(waiting.ID); r.Status != trellis.StatusSucceeded || string(r.Output) != `"shipped"` {
		t.Fatalf("the run after the page's event: %s %s", r.Status, r.Output)
	}

	// The search by an ID that names no run says so.
	run(t, ctx,
		chromedp.SetValue("#search-id", "no-such-order", chromedp.ByID),
		chromedp.Submit("#search-id", chromedp.ByID),
		chromedp.WaitVisible("#search-message", chromedp.ByID),
		chromedp.Text("#search-message", &msg, chromedp.ByID))
	if !strings.Contains(msg, "No run with this ID") {
		t.Fatalf("the search for an unknown ID: %q", msg)
	}
	screenshot(t, ctx, "ui-search-none.png")

	// The namespace switcher: from the queues of default to those of billing.
	run(t, ctx,
		chromedp.Navigate(e.base+"/ui/default/queues"),
		chromedp.WaitVisible("#queues", chromedp.ByID),
		chromedp.Click("#ns-switch summary", chromedp.ByQuery),
		chromedp.WaitVisible(`#ns-switch a[data-ns="billing"]`, chromedp.ByQuery))
	screenshot(t, ctx, "ui-namespaces.png")
	run(t, ctx,
		chromedp.Click(`#ns-switch a[data-ns="billing"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#queues", chromedp.ByID),
		chromedp.Evaluate(`location.pathname`, &path))
	if path != "/ui/billing/queues" {
		t.Fatalf("the switcher went to %s", path)
	}

	// Wrapping: in a narrow window a long wait reason wraps between words,
	// never inside one; an ID may break anywhere.
	unserved := e.start("reconcile-invoices-with-the-ledger", nil, nil) // served by no worker: its reason says so
	e.until(unserved.ID, func() bool {
		r, _ := e.worker.Get(bg, unserved.ID)
		return strings.Contains(r.WaitReason, "no live worker")
	})
	var lines, split int
	var wrap []string
	run(t, ctx,
		chromedp.EmulateViewport(520, 900),
		chromedp.Navigate(e.base+"/ui/default/runs/"+unserved.ID),
		chromedp.WaitVisible("#wait-reason", chromedp.ByID),
		chromedp.Evaluate(`(() => {
			const dd = document.getElementById("wait-reason");
			const lh = parseFloat(getComputedStyle(dd).lineHeight) || 20;
			return Math.round(dd.getBoundingClientRect().height / lh);
		})()`, &lines),
		// Each word of the reason (a hyphen ends one, as in print): a range
		// over it has one line box.
		chromedp.Evaluate(`(() => {
			const t = document.getElementById("wait-reason").firstChild;
			let split = 0;
			for (const m of t.data.matchAll(/[^\s-]+-?/g)) {
				const r = document.createRange();
				r.setStart(t, m.index); r.setEnd(t, m.index + m[0].length);
				if (r.getClientRects().length > 1) split++;
			}
			return split;
		})()`, &split),
		chromedp.Evaluate(`[getComputedStyle(document.getElementById("wait-reason")).overflowWrap,
			getComputedStyle(document.getElementById("wait-reason")).wordBreak,
			getComputedStyle(document.querySelector("h1 .id")).overflowWrap]`, &wrap))
	screenshot(t, ctx, "ui-wrapping.png")
	if lines < 2 || split != 0 || strings.Join(wrap, " ") != "break-word normal anywhere" {
		t.Fatalf("the wait reason in a narrow window: %d lines, %d words split, wrapping %v", lines, split, wrap)
	}
	run(t, ctx, chromedp.EmulateViewport(1360, 900))

	// The approver without the reader role opens the request's own page from
	// the approvals: what it decides on, not the run's input; it approves there.
	order := e.start("needs-anyone", map[string]any{"card": "4111-1111"}, nil)
	approval := e.pendingApproval(order.ID)
	if landed := signIn(t, ctx, e.base, "approver"); landed != "/ui/default/approvals" {
		t.Fatalf("the approver landed on %s", landed)
	}
	var text string
	run(t, ctx,
		chromedp.Click(`a[data-approval-link="`+approval+`"]`, chromedp.ByQuery),
		chromedp.WaitVisible("#approval-run", chromedp.ByID),
		chromedp.Text("main", &text, chromedp.ByQuery))
	if !strings.Contains(text, "needs-anyone") || !strings.Contains(text, order.ID) || strings.Contains(text, "4111") {
		t.Fatalf("the approver's view: %q", text)
	}
	run(t, ctx, chromedp.SendKeys(".decide .comment", "fine by me", chromedp.ByQuery))
	screenshot(t, ctx, "ui-approval-approver.png")
	run(t, ctx,
		chromedp.Click(`.decide button[name=approve]`, chromedp.ByQuery),
		chromedp.WaitVisible("#decision", chromedp.ByID))
	if a, err := e.worker.GetApproval(bg, approval); err != nil || a.Status != trellis.ApprovalApproved || a.Principal != "approver" || a.Comment != "fine by me" {
		t.Fatalf("the approval decided on its page: %+v %v", a, err)
	}
}
