package server

import (
	"context"
	"encoding/json"
	"errors"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// An event sent from a run's page: refused input (a bad name, a payload that
// is not JSON) shows the page again with the reason and what was typed, and
// sends nothing; a good one reaches the run; a reader sees no form and is
// refused it; a finished run refuses it with the API's reason.
func TestUISendEvent(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t), withOperator)
	ctx := context.Background()
	waiting := e.start("await-go", nil, nil)
	e.until(waiting.ID, func() bool {
		r, _ := e.worker.Get(ctx, waiting.ID)
		return r.Status == trellis.StatusWaiting
	})
	op, reader := e.uiSession("operator"), e.uiSession("reader")
	path := "/ui/default/runs/" + waiting.ID
	page := string(op.get(path).want(t, 200).body)
	if !strings.Contains(page, `id="event-card"`) || !strings.Contains(page, `placeholder="go"`) {
		t.Fatalf("the run page offers no event form (or not the event it waits for): %.3000s", page)
	}
	if page := string(reader.get(path).want(t, 200).body); strings.Contains(page, `id="event-card"`) {
		t.Error("a reader sees the event form")
	}
	send := func(u *uiClient, name, payload string) *resp {
		return u.post(path+"/event", url.Values{"csrf": {u.csrf()}, "name": {name}, "payload": {payload}}, e.base)
	}
	for _, c := range []struct{ name, payload, says string }{
		{"go", `{"unclosed": `, "not JSON"},
		{"go", `done`, "not JSON"},
		{"", `"x"`, "empty event name"},
		{"a/b", `"x"`, "slash"},
	} {
		r := send(op, c.name, c.payload)
		body := string(r.body)
		if r.status != 400 || !strings.Contains(body, `id="event-error"`) || !strings.Contains(body, c.says) ||
			!strings.Contains(body, `data-src="`+path+`"`) {
			t.Errorf("event %q %q: %d %.500s", c.name, c.payload, r.status, body)
		}
		if !strings.Contains(body, `id="event-name" value="`+c.name+`"`) {
			t.Errorf("event %q %q: the form does not keep the name typed", c.name, c.payload)
		}
	}
	// A form over the UI's limit is refused as such, not as a form without fields.
	if r := send(op, "go", `"`+strings.Repeat("x", uiMaxForm)+`"`); r.status != 413 || !strings.Contains(string(r.body), "form is larger than 64 KiB") {
		t.Errorf("an event form over the limit: %d %.300s", r.status, r.body)
	}
	if r := send(reader, "go", `"x"`); r.status != 403 {
		t.Fatalf("a reader's event: %d", r.status)
	}
	if r, _ := e.worker.Get(ctx, waiting.ID); r.Status != trellis.StatusWaiting {
		t.Fatalf("refused events moved the run: %s", r.Status)
	}
	r := send(op, "go", `"from the page"`)
	if r.status != 303 || r.header.Get("Location") != path+"?sent=go" {
		t.Fatalf("send: %d %s %.300s", r.status, r.header.Get("Location"), r.body)
	}
	done := e.waitRun(waiting.ID)
	var out string
	if done.Status != trellis.StatusSucceeded || json.Unmarshal(done.Output, &out) != nil || out != "from the page" {
		t.Fatalf("the run after the event: %s %s", done.Status, done.Output)
	}
	// Finished: the page offers no form, and a form sent anyway says why.
	if page := string(op.get(path).want(t, 200).body); strings.Contains(page, `id="event-card"`) {
		t.Error("a finished run's page offers the event form")
	}
	if r := send(op, "go", `1`); r.status != 409 || !strings.Contains(string(r.body), `id="event-error"`) {
		t.Errorf("an event to a finished run: %d %.500s", r.status, r.body)
	}
}

// The search box finds a run by run ID or workflow ID and sends to its page;
// an ID that names no run says so; a reader of one queue searches that queue.
func TestUISearch(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	ctx := context.Background()
	r := e.start("echo", "x", map[string]any{"id": "order-1234"})
	q1 := e.start("echo", "y", map[string]any{"queue": "q1"})
	reader, q1r := e.uiSession("reader"), e.uiSession("q1-reader")
	page := string(reader.get("/ui/default/runs").want(t, 200).body)
	if !strings.Contains(page, `id="search"`) || !strings.Contains(page, `action="/ui/default/search"`) {
		t.Fatalf("the navigation has no search box: %.1500s", page)
	}
	for _, id := range []string{r.ID, "order-1234"} {
		res := reader.get("/ui/default/search?id=" + url.QueryEscape(id))
		if res.status != 303 || res.header.Get("Location") != "/ui/default/runs/"+r.ID {
			t.Errorf("search %s: %d %s", id, res.status, res.header.Get("Location"))
		}
	}
	res := reader.get("/ui/default/search?id=no-such-run")
	if res.status != 404 || !strings.Contains(string(res.body), "No run with this ID") || !strings.Contains(string(res.body), `value="no-such-run"`) {
		t.Errorf("search for an unknown ID: %d %.1500s", res.status, res.body)
	}
	if res := reader.get("/ui/default/search?id=a%2Fb"); res.status != 400 || !strings.Contains(string(res.body), "slash") {
		t.Errorf("search for a malformed ID: %d %.300s", res.status, res.body)
	}
	if res := reader.get("/ui/default/search?id="); res.status != 400 || !strings.Contains(string(res.body), "Type a run ID") {
		t.Errorf("empty search: %d", res.status)
	}
	if _, err := e.worker.Get(ctx, r.ID); err != nil {
		t.Fatal(err)
	}
	// The reader of queue q1: its search box keeps to q1.
	page = string(q1r.get("/ui/default/runs?queue=q1").want(t, 200).body)
	if !strings.Contains(page, `<input type="hidden" name="queue" value="q1">`) {
		t.Fatalf("the q1 reader's search box does not keep to q1: %.1500s", page)
	}
	if res := q1r.get("/ui/default/search?queue=q1&id=" + q1.ID); res.status != 303 || res.header.Get("Location") != "/ui/default/runs/"+q1.ID {
		t.Errorf("q1 reader's search for a run of q1: %d %s", res.status, res.header.Get("Location"))
	}
	if res := q1r.get("/ui/default/search?queue=q1&id=" + r.ID); res.status != 403 {
		t.Errorf("q1 reader's search for a run of another queue: %d", res.status)
	}
	if res := q1r.get("/ui/default/search?id=" + q1.ID); res.status != 403 {
		t.Errorf("q1 reader's search of the whole namespace: %d", res.status)
	}
	// An approver (no reader role) has no search box.
	if page := string(e.uiSession("approver").get("/ui/default/approvals").want(t, 200).body); strings.Contains(page, `id="search"`) {
		t.Error("an approver without the reader role has a search box")
	}
}

// The namespace switcher lists the namespaces in which the principal may open
// a page, each linked to the same page there (or its first page there); a
// principal of one namespace gets none.
func TestUINamespaceSwitcher(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) {
		toks := testTokens()
		toks["two"] = &auth.Principal{Name: "two", Grants: []auth.Grant{
			{Role: auth.RoleReader, Namespace: "default"}, {Role: auth.RoleApprover, Namespace: "billing"},
			{Role: auth.RoleProducer, Namespace: "intake"}}}
		c.Authenticator = toks
	})
	ctx := context.Background()
	for _, ns := range []string{"billing", "zeta"} {
		if _, err := e.st.NamespaceCreate(ctx, &store.NamespaceCreateParams{Name: ns}); err != nil {
			t.Fatal(err)
		}
	}
	spaces := func(page string) map[string]string {
		m := map[string]string{}
		for _, x := range regexp.MustCompile(`<a href="([^"]*)" data-ns="([^"]*)"`).FindAllStringSubmatch(page, -1) {
			m[x[2]] = strings.ReplaceAll(x[1], "&amp;", "&")
		}
		return m
	}
	admin := e.uiSession("admin")
	got := spaces(string(admin.get("/ui/default/queues").want(t, 200).body))
	want := map[string]string{"default": "/ui/default/queues", "billing": "/ui/billing/queues", "zeta": "/ui/zeta/queues"}
	if len(got) != len(want) {
		t.Errorf("admin's switcher: %v, want %v", got, want)
	}
	for ns, href := range want {
		if got[ns] != href {
			t.Errorf("admin's switcher: %s links %q, want %q", ns, got[ns], href)
		}
		if admin.get(href).status != 200 {
			t.Errorf("admin's switcher link %s does not open", href)
		}
	}
	// A reader of default, approver of billing, producer of intake: default's
	// runs, billing's approvals; intake opens no page.
	two := e.uiSession("two")
	got = spaces(string(two.get("/ui/default/runs").want(t, 200).body))
	if len(got) != 2 || got["default"] != "/ui/default/runs" || got["billing"] != "/ui/billing/approvals" {
		t.Errorf("switcher of a principal of two namespaces: %v", got)
	}
	for _, href := range got {
		if two.get(href).status != 200 {
			t.Errorf("switcher link %s does not open", href)
		}
	}
	if got := spaces(string(e.uiSession("reader").get("/ui/default/runs").want(t, 200).body)); len(got) != 0 {
		t.Errorf("a reader of one namespace has a switcher: %v", got)
	}
}

// The approval's page shows an approver without the reader role what deciding
// needs (the request, its details, the run's workflow and status, the op that
// asks) and not the run's input or values; it decides from there. A reader
// sees it without a button; a producer may not open it; a principal the
// request does not name is told who may decide.
func TestUIApprovalPage(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	ctx := context.Background()
	waitingOn := trellis.NewWorkflow("refund", func(wc *trellis.Context, in map[string]any) (string, error) {
		if _, err := trellis.Step(wc, "look-up", func(context.Context) (int, error) { return 42, nil }); err != nil {
			return "", err
		}
		if err := wc.Set("card", "4111-secret-value"); err != nil {
			return "", err
		}
		d, err := trellis.Approval(wc, "refund-ok", trellis.ApprovalOptions{Subject: "refund 120 EUR to order 77",
			Details: map[string]any{"amount": 120, "reason": "damaged"}})
		return d.Principal, err
	})
	if err := e.worker.Register(ctx, waitingOn); err != nil {
		t.Fatal(err)
	}
	run := e.start("refund", map[string]any{"secret-input": "hunter2"}, nil)
	id := e.pendingApproval(run.ID)
	path := "/ui/default/approvals/" + id
	approver := e.uiSession("approver")
	list := string(approver.get("/ui/default/approvals").want(t, 200).body)
	if !strings.Contains(list, `href="`+path+`"`) {
		t.Fatalf("the approvals page does not link the request's page: %.2000s", list)
	}
	page := string(approver.get(path).want(t, 200).body)
	for _, want := range []string{"refund-ok", "refund 120 EUR to order 77", `&#34;amount&#34;: 120`, "damaged", `id="approval-workflow">refund<`,
		"st-waiting", run.ID, `id="approval-step">op #`, "approval refund-ok", "step look-up", `name="approve"`, `name="back" value="approval"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the approver's view lacks %q", want)
		}
	}
	for _, secret := range []string{"hunter2", "4111-secret-value", `id="approval-run-link"`} {
		if strings.Contains(page, secret) {
			t.Errorf("the approver's view shows %q, which is a reader's", secret)
		}
	}
	if approver.get("/ui/default/runs/"+run.ID).status != 403 {
		t.Fatal("the approver opens the run's page")
	}
	// A reader: the same page with a link to the run, no button.
	rp := string(e.uiSession("reader").get(path).want(t, 200).body)
	if strings.Contains(rp, `name="approve"`) || !strings.Contains(rp, `id="approval-run-link"`) || !strings.Contains(rp, "You may not decide") {
		t.Errorf("the reader's view of the request: %.3000s", rp)
	}
	if r := e.uiSession("producer").get(path); r.status != 403 {
		t.Errorf("a producer opens the request's page: %d", r.status)
	}
	if r := approver.get("/ui/default/approvals/no-such-approval"); r.status != 404 {
		t.Errorf("an unknown request's page: %d", r.status)
	}
	// Decide from the page: back to it, decided.
	r := approver.post("/ui/default/approvals/"+id+"/approve", url.Values{"csrf": {approver.csrf()}, "comment": {"ok from the page"}, "back": {"approval"}}, e.base)
	if r.status != 303 || r.header.Get("Location") != path {
		t.Fatalf("approve from the request's page: %d %s %.300s", r.status, r.header.Get("Location"), r.body)
	}
	if done := e.waitRun(run.ID); done.Status != trellis.StatusSucceeded {
		t.Fatalf("the approved run: %s", done.Status)
	}
	page = string(approver.get(path).want(t, 200).body)
	if !strings.Contains(page, `id="decision"`) || !strings.Contains(page, "ok from the page") || strings.Contains(page, `name="approve"`) {
		t.Errorf("the decided request's page: %.3000s", page)
	}
	// A request naming alice: the approver is told who may decide.
	named := e.start("needs-alice", nil, nil)
	page = string(approver.get("/ui/default/approvals/"+e.pendingApproval(named.ID)).want(t, 200).body)
	if !strings.Contains(page, "Only alice may decide this request.") || strings.Contains(page, `name="approve"`) {
		t.Errorf("a request naming alice, seen by another approver: %.3000s", page)
	}
}

// The run page tells claims (times a worker took the run) from its steps'
// attempts.
func TestUIClaimsAndStepAttempts(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	ctx := context.Background()
	var tries atomic.Int32
	flaky := trellis.NewWorkflow("flaky-then-wait", func(wc *trellis.Context, _ any) (string, error) {
		_, err := trellis.Step(wc, "flaky", func(context.Context) (int, error) {
			if tries.Add(1) < 3 {
				return 0, errors.New("flaky")
			}
			return 1, nil
		}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 5, Backoff: trellis.Fixed(10e6)}})
		if err != nil {
			return "", err
		}
		if _, err := trellis.Step(wc, "steady", func(context.Context) (int, error) { return 2, nil }); err != nil {
			return "", err
		}
		return trellis.WaitEvent[string](wc, "go", 0)
	})
	if err := e.worker.Register(ctx, flaky); err != nil {
		t.Fatal(err)
	}
	run := e.start("flaky-then-wait", nil, nil)
	e.until(run.ID, func() bool {
		r, _ := e.worker.Get(ctx, run.ID)
		return r.Status == trellis.StatusWaiting
	})
	e.do("POST", "/v1/namespaces/default/runs/"+run.ID+"/events", "producer", map[string]any{"name": "go", "payload": "x"}).want(t, 204)
	done := e.waitRun(run.ID)
	page := string(e.uiSession("reader").get("/ui/default/runs/"+run.ID).want(t, 200).body)
	claims := regexp.MustCompile(`id="claims">(\d+)<`).FindStringSubmatch(page)
	if claims == nil || claims[1] != strconv.Itoa(done.Attempts) || done.Attempts < 2 {
		t.Errorf("claims: %v, the run's %d", claims, done.Attempts)
	}
	if !strings.Contains(page, `id="step-attempts">4 <span class="dim">(2 failed)</span> <span class="dim">over 2 steps</span>`) {
		t.Errorf("step attempts: %s", regexp.MustCompile(`id="step-attempts">.*`).FindString(page))
	}
	if strings.Contains(page, "<dt>Attempts</dt>") {
		t.Error("the run page still says Attempts")
	}
}
