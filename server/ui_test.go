package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// uiPublic lists the UI routes that need no session, on purpose: any other
// route must name a role and a scope.
var uiPublic = map[string]bool{
	"GET /{$}": true, "GET /ui-assets/{file}": true, "GET /ui/login": true,
	"POST /ui/login": true, "POST /ui/logout": true,
}

// Every UI route has a rule: it is one of the deliberate public routes, or it
// names a role and a scope.
func TestEveryUIRouteHasARule(t *testing.T) {
	for _, rt := range uiRouteTable {
		key := rt.method + " " + rt.pattern
		switch {
		case rt.public && !uiPublic[key]:
			t.Errorf("%s: public UI route not in the deliberate list", key)
		case rt.public && rt.role != "":
			t.Errorf("%s: public with a role", key)
		case !rt.public && (!rt.role.Valid() || rt.scope == scopeNone || rt.orRole != "" && !rt.orRole.Valid()):
			t.Errorf("%s: no authorization rule (role %q, scope %d)", key, rt.role, rt.scope)
		case !rt.public && rt.scope != scopeGlobal && !strings.HasPrefix(rt.pattern, "/ui/{ns}/"):
			t.Errorf("%s: a UI route with a rule must be under /ui/{ns}/ (or concern every namespace)", key)
		case !rt.public && !strings.HasPrefix(rt.pattern, "/ui/"):
			t.Errorf("%s: a UI route with a rule must be under /ui/", key)
		}
	}
	// The navigation's pages are pages of the table, whose rules decide who
	// sees them (mayOpen).
	for _, pg := range uiNavPages {
		if rt := uiRouteFor("GET", pg.pattern); rt == nil || rt.public || rt.stream {
			t.Errorf("nav page %s: %s is not a page of uiRouteTable", pg.key, pg.pattern)
		}
	}
}

// A UI route without a rule is denied to everyone, even an admin.
func TestUIRouteWithoutRuleIsDenied(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	ui := e.uiSession("admin")
	ruleless := uiRoute{method: "GET", pattern: "/ui/{ns}/ruleless",
		handle: func(*Server, http.ResponseWriter, *http.Request, *uiCall) error { return nil }}
	mux := http.NewServeMux()
	mux.Handle("GET /ui/{ns}/ruleless", e.srv.wrapUI(ruleless))
	r, _ := http.NewRequest("GET", e.base+"/ui/default/ruleless", nil)
	for _, c := range ui.jar.Cookies(r.URL) {
		r.AddCookie(c)
	}
	w := &recorder{header: http.Header{}}
	mux.ServeHTTP(w, r)
	if w.status != 403 {
		t.Fatalf("ruleless UI route answered %d", w.status)
	}
}

type recorder struct {
	header http.Header
	status int
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = 200
	}
	return len(b), nil
}
func (r *recorder) WriteHeader(s int) { r.status = s }

// uiClient is a browser-like client: a cookie jar and no redirects followed.
type uiClient struct {
	e    *env
	jar  *cookiejar.Jar
	http *http.Client
}

// uiSession signs in with token through the login form.
func (e *env) uiSession(token string) *uiClient {
	e.t.Helper()
	jar, _ := cookiejar.New(nil)
	u := &uiClient{e: e, jar: jar, http: &http.Client{Jar: jar,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	if token != "" {
		r := u.post("/ui/login", url.Values{"token": {token}}, e.base)
		if r.status != 303 {
			e.t.Fatalf("sign in as %s: %d %s", token, r.status, r.body)
		}
	}
	return u
}

// csrf is the CSRF token of the client's session.
func (u *uiClient) csrf() string {
	base, _ := url.Parse(u.e.base)
	for _, c := range u.jar.Cookies(base) {
		if c.Name == sessionCookie {
			s, err := u.e.srv.ui.open(c.Value, time.Now())
			if err != nil {
				u.e.t.Fatal(err)
			}
			return u.e.srv.ui.csrfToken(s)
		}
	}
	return ""
}

func (u *uiClient) get(path string) *resp {
	u.e.t.Helper()
	res, err := u.http.Get(u.e.base + path)
	if err != nil {
		u.e.t.Fatal(err)
	}
	return readResp(u.e.t, res)
}

// open sends a GET and reads its status and headers only: a stream's body
// does not end while its run is active.
func (u *uiClient) open(path string) *resp {
	u.e.t.Helper()
	res, err := u.http.Get(u.e.base + path)
	if err != nil {
		u.e.t.Fatal(err)
	}
	res.Body.Close()
	return &resp{status: res.StatusCode, header: res.Header, body: []byte("(stream)")}
}

// fetch GETs a UI route: a page, or the head of a stream.
func (u *uiClient) fetch(rt uiRoute, path string) *resp {
	u.e.t.Helper()
	if rt.stream {
		return u.open(path)
	}
	return u.get(path)
}

// post sends a form with the given Origin header ("" for none).
func (u *uiClient) post(path string, form url.Values, origin string) *resp {
	u.e.t.Helper()
	req, _ := http.NewRequest("POST", u.e.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	res, err := u.http.Do(req)
	if err != nil {
		u.e.t.Fatal(err)
	}
	return readResp(u.e.t, res)
}

func readResp(t *testing.T, res *http.Response) *resp {
	t.Helper()
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return &resp{status: res.StatusCode, header: res.Header, body: b}
}

// The walk of the UI: every route with a rule, with a session of every role, is
// allowed exactly when the route's role (or admin) is granted; without a
// session a page sends to sign-in and a form is refused.
func TestUIAuthorizationWalk(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	roles := []auth.Role{auth.RoleAdmin, auth.RoleProducer, auth.RoleWorker, auth.RoleReader, auth.RoleApprover}
	sessions := map[auth.Role]*uiClient{}
	for _, role := range roles {
		token := string(role)
		if role == auth.RoleAdmin {
			token = "admin"
		}
		sessions[role] = e.uiSession(token)
	}
	other := e.uiSession("other-reader")
	anon := e.uiSession("")
	walkQueue(t, e)
	uiWalkSchedule(t, e)
	for _, rt := range uiRouteTable {
		if rt.public {
			continue
		}
		for _, role := range roles {
			// A fresh run and approval per request: cancelling or deciding one
			// must not turn the next request into a conflict.
			run := e.start("needs-anyone", nil, nil)
			approval := e.pendingApproval(run.ID)
			path := strings.Replace(rt.pattern, "{ns}", "default", 1)
			if strings.Contains(rt.pattern, "/approvals/{id}") {
				path = strings.Replace(path, "{id}", approval, 1)
			}
			path = strings.Replace(path, "{id}", run.ID, 1)
			path = strings.Replace(path, "{queue}", "walk-q", 1)
			path = strings.Replace(path, "{name}", "walk-s", 1)
			u := sessions[role]
			var r *resp
			if rt.method == "GET" {
				r = u.fetch(rt, path)
			} else {
				r = u.post(path, url.Values{"csrf": {u.csrf()}}, e.base)
			}
			allowed := role == auth.RoleAdmin || role == rt.role || role == rt.orRole
			denied := r.status == 403 || r.status == 401
			if allowed == denied {
				t.Errorf("%s %s as %s: %d %.200s (allowed by the table: %v)", rt.method, rt.pattern, role, r.status, r.body, allowed)
			}
			if !allowed && !rt.stream && !strings.Contains(string(r.body), "permission") {
				t.Errorf("%s %s as %s: refusal page does not say why: %.300s", rt.method, rt.pattern, role, r.body)
			}
			if role != auth.RoleAdmin {
				continue
			}
			// Another namespace's reader and no session at all.
			var ro, ra *resp
			if rt.method == "GET" {
				ro, ra = other.fetch(rt, path), anon.fetch(rt, path)
			} else {
				ro, ra = other.post(path, url.Values{"csrf": {other.csrf()}}, e.base), anon.post(path, nil, e.base)
			}
			if ro.status != 403 {
				t.Errorf("%s %s as a reader of another namespace: %d", rt.method, rt.pattern, ro.status)
			}
			if rt.method == "GET" && (ra.status != 303 || !strings.HasPrefix(ra.header.Get("Location"), "/ui/login?next=")) {
				t.Errorf("GET %s without a session: %d %s", rt.pattern, ra.status, ra.header.Get("Location"))
			}
			if rt.method == "POST" && ra.status != 401 {
				t.Errorf("POST %s without a session: %d", rt.pattern, ra.status)
			}
		}
	}
}

// The UI shows only what the principal may open, by the routes' own rules:
// every principal of the test tokens signs in and "/" sends it to a page it
// may open (an approver-only one to the approvals), or refuses it when it may
// open none; its navigation links exactly the pages it may open; the approvals
// page links a request's run only for a principal that may open the run.
func TestUIAuthorizationWalkNav(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	decidedRun := e.start("needs-anyone", nil, nil)
	e.do("POST", "/v1/namespaces/default/approvals/"+e.pendingApproval(decidedRun.ID)+"/approve", "approver", map[string]any{}).want(t, 200)
	pendingRun := e.start("needs-anyone", nil, nil)
	e.pendingApproval(pendingRun.ID)
	home := map[string]string{ // where "/" sends each principal ("": refused)
		"admin": "/ui/default/runs", "reader": "/ui/default/runs", "approver": "/ui/default/approvals",
		"alice": "/ui/default/approvals", "q1-reader": "/ui/default/runs?queue=q1", "other-reader": "/ui/other/runs",
		"global-reader": "/ui/default/runs", "producer": "", "worker": "", "q1-producer": "",
	}
	navLink := regexp.MustCompile(`<a href="([^"]*)" data-nav="(\w+)"`)
	for token := range testTokens() {
		u := e.uiSession(token)
		want, ok := home[token]
		if !ok {
			t.Fatalf("token %s: no expected home page", token)
		}
		r := u.get("/")
		if want == "" {
			if r.status != 403 || !strings.Contains(string(r.body), "may open no page") {
				t.Errorf("/ as %s: %d %s, want 403 saying why", token, r.status, r.header.Get("Location"))
			}
			continue
		}
		if loc := r.header.Get("Location"); r.status != 303 || loc != want {
			t.Errorf("/ as %s: %d to %q, want %q", token, r.status, loc, want)
			continue
		}
		page := u.get(want)
		if page.status != 200 {
			t.Errorf("%s: home page %s answered %d", token, want, page.status)
			continue
		}
		// The navigation links each page of the namespace the principal may
		// open, and no other.
		ns := strings.Split(want, "/")[2]
		shown := map[string]string{}
		for _, m := range navLink.FindAllStringSubmatch(string(page.body), -1) {
			shown[m[2]] = strings.ReplaceAll(m[1], "&amp;", "&")
		}
		for _, pg := range uiNavPages {
			path := "/ui/" + ns + strings.TrimPrefix(pg.pattern, uiNS)
			href, linked := shown[pg.key]
			switch {
			case linked && u.get(href).status != 200:
				t.Errorf("%s: nav links %s (%s), which it may not open", token, pg.key, href)
			case !linked && u.get(path).status != 403:
				t.Errorf("%s: nav lacks %s, which it may open", token, pg.key)
			}
		}
		if len(shown) == 0 {
			t.Errorf("%s: no nav on its home page", token)
		}
		// The runs page's Clear link opens for the principal (a reader of
		// one queue keeps its queue's filter).
		if href, ok := shown["runs"]; ok {
			m := regexp.MustCompile(`id="f-clear" href="([^"]*)"`).FindStringSubmatch(string(u.get(href).body))
			if m == nil {
				t.Errorf("%s: the runs page has no Clear link", token)
			} else if clear := strings.ReplaceAll(m[1], "&amp;", "&"); u.get(clear).status != 200 {
				t.Errorf("%s: the runs page's Clear link %s does not open", token, clear)
			}
		}
		// The approvals page: a run is a link for a principal that may open it,
		// its ID as text for one that may not.
		ap := u.get("/ui/" + ns + "/approvals")
		if ap.status != 200 || ns != "default" {
			continue
		}
		for _, id := range []string{pendingRun.ID, decidedRun.ID} {
			runPage := u.get("/ui/default/runs/" + id).status
			linked := strings.Contains(string(ap.body), `data-run-link="`+id+`"`)
			text := strings.Contains(string(ap.body), `data-run="`+id+`"`)
			if linked == text || linked != (runPage == 200) {
				t.Errorf("%s: approvals page: run %s linked %v, as text %v; its page answers %d", token, id, linked, text, runPage)
			}
		}
	}
}

// The session cookie is HttpOnly, SameSite=Strict, and does not hold the token
// in the clear; a forged or altered one is no session.
func TestUISessionCookie(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	u := e.uiSession("")
	r := u.post("/ui/login", url.Values{"token": {"admin"}}, e.base)
	if r.status != 303 {
		t.Fatalf("sign in: %d", r.status)
	}
	ck := r.header.Get("Set-Cookie")
	for _, want := range []string{sessionCookie + "=", "HttpOnly", "SameSite=Strict", "Path=/"} {
		if !strings.Contains(ck, want) {
			t.Errorf("Set-Cookie %q lacks %q", ck, want)
		}
	}
	if strings.Contains(strings.ToLower(ck), "admin") {
		t.Errorf("cookie shows the token: %s", ck)
	}
	if got := u.get("/ui/default/runs"); got.status != 200 {
		t.Fatalf("runs page with a session: %d", got.status)
	}
	// Alter the cookie: it no longer opens.
	base, _ := url.Parse(e.base)
	for _, c := range u.jar.Cookies(base) {
		c.Value = c.Value[:len(c.Value)-2] + "AA"
		u.jar.SetCookies(base, []*http.Cookie{c})
	}
	if got := u.get("/ui/default/runs"); got.status != 303 {
		t.Fatalf("runs page with an altered cookie: %d", got.status)
	}
	// A wrong token signs nobody in, and says so.
	bad := e.uiSession("")
	r = bad.post("/ui/login", url.Values{"token": {"wrong"}}, e.base)
	if r.status != 401 || r.header.Get("Set-Cookie") != "" || !strings.Contains(string(r.body), "Unknown, revoked or expired token") {
		t.Fatalf("wrong token: %d %q", r.status, r.header.Get("Set-Cookie"))
	}
	// Sign-in from another site is refused.
	if r := bad.post("/ui/login", url.Values{"token": {"admin"}}, "http://evil.example"); r.status != 403 {
		t.Fatalf("cross-site sign-in: %d", r.status)
	}
	// An open redirect through next is not followed.
	r = bad.post("/ui/login", url.Values{"token": {"admin"}, "next": {"//evil.example/x"}}, e.base)
	if loc := r.header.Get("Location"); loc != "/ui/default/runs" {
		t.Fatalf("next=//evil.example: Location %q", loc)
	}
}

// A form without the session's CSRF token, or from another origin, is refused
// and changes nothing.
func TestUICSRF(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	u := e.uiSession("admin")
	run := e.start("await-go", nil, nil)
	path := "/ui/default/runs/" + run.ID + "/cancel"
	for name, tc := range map[string]struct {
		form   url.Values
		origin string
	}{
		"no token":        {url.Values{}, e.base},
		"wrong token":     {url.Values{"csrf": {"x" + u.csrf()}}, e.base},
		"other origin":    {url.Values{"csrf": {u.csrf()}}, "http://evil.example"},
		"no origin":       {url.Values{"csrf": {u.csrf()}}, ""},
		"other's session": {url.Values{"csrf": {e.uiSession("producer").csrf()}}, e.base},
	} {
		r := u.post(path, tc.form, tc.origin)
		if r.status != 403 {
			t.Errorf("%s: %d %.200s", name, r.status, r.body)
		}
	}
	got, err := e.worker.Get(context.Background(), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.Terminal() || got.CancelRequested {
		t.Fatalf("refused cancellations changed the run: %s", got.Status)
	}
	// With both, it works.
	if r := u.post(path, url.Values{"csrf": {u.csrf()}}, e.base); r.status != 303 {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	e.until(run.ID, func() bool {
		got, _ := e.worker.Get(context.Background(), run.ID)
		return got.Status == trellis.StatusCancelled
	})
}

// Bad filters get a clear error page; the pages render with data in them.
func TestUIPages(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) { testUIPages(t, url(t)) })
	}
}

func testUIPages(t *testing.T, url string) {
	e := newEnv(t, url)
	u := e.uiSession("admin")
	run := e.start("echo", map[string]any{"hello": "world"}, nil)
	e.waitRun(run.ID)
	waiting := e.start("needs-anyone", nil, nil)
	e.pendingApproval(waiting.ID)
	if err := e.worker.Register(context.Background(), uiJob); err != nil {
		t.Fatal(err)
	}
	job := e.waitRun(e.start("ui-double", 21, nil).ID)
	failedJob := e.waitRun(e.start("ui-double", -1, nil).ID)
	if err := e.worker.Register(context.Background(), uiFlaky); err != nil {
		t.Fatal(err)
	}
	flakyJob := e.waitRun(e.start("ui-flaky", nil, nil).ID)
	for _, bad := range []string{"status=nope", "after=yesterday", "page_token=zz"} {
		r := u.get("/ui/default/runs?" + bad)
		if r.status != 400 || !strings.Contains(string(r.body), "invalid") && !strings.Contains(string(r.body), "Invalid") {
			t.Errorf("runs?%s: %d %.300s", bad, r.status, r.body)
		}
	}
	for path, wants := range map[string][]string{
		"/ui/default/runs":                          {run.ID, "succeeded", `data-status="succeeded"`},
		"/ui/default/runs?status=waiting":           {waiting.ID},
		"/ui/default/runs/" + run.ID:                {"hello", "world", "seen", "Timeline"},
		"/ui/default/runs/" + run.ID + "?partial=1": {"Timeline"},
		"/ui/default/approvals":                     {"Approve", waiting.ID[:14]},
		"/ui/default/workers":                       {"echo", "live"},
		"/ui/default/runs/" + job.ID:                {"42", "No ops recorded: a job whose first attempt succeeded records none."},
	} {
		r := u.get(path)
		if r.status != 200 {
			t.Errorf("%s: %d %.300s", path, r.status, r.body)
			continue
		}
		for _, w := range wants {
			if !strings.Contains(string(r.body), w) {
				t.Errorf("%s lacks %q", path, w)
			}
		}
	}
	// The step that failed for good is one bar, its last attempt's, and the
	// row has that attempt's time (it had an empty bar and 0ms).
	if r := u.get("/ui/default/runs/" + failedJob.ID); strings.Count(string(r.body), `class="fail"`) != 1 ||
		strings.Contains(string(r.body), `<td class="nowrap">0ms</td>`) || !strings.Contains(string(r.body), "attempt 1 failed after") {
		t.Errorf("failed job's timeline: %s", r.body)
	}
	// A job that succeeded at its second attempt, after a 300 ms backoff: the
	// row's bar and time are that attempt's (20 ms), not the backoff's.
	if r := u.get("/ui/default/runs/" + flakyJob.ID); !strings.Contains(string(r.body), "ui-flaky: attempt 2 succeeded") {
		t.Errorf("flaky job's timeline lacks its succeeded attempt: %s", r.body)
	} else {
		for _, m := range regexp.MustCompile(`<td class="nowrap">([0-9.]+)(ms|s)</td>`).FindAllStringSubmatch(string(r.body), -1) {
			if d, _ := time.ParseDuration(m[1] + m[2]); d >= 300*time.Millisecond {
				t.Errorf("flaky job's row shows %s, the backoff included", m[1]+m[2])
			}
		}
	}
	if r := u.get("/ui/default/runs/" + run.ID + "?partial=1"); strings.Contains(string(r.body), "<html") {
		t.Error("partial page has the layout")
	}
	if r := u.get("/ui/default/runs?status=waiting"); strings.Contains(string(r.body), run.ID) {
		t.Error("status filter shows a succeeded run")
	}
	if r := u.get("/ui-assets/ui.css"); r.status != 200 || r.header.Get("Content-Type") != "text/css; charset=utf-8" {
		t.Errorf("ui.css: %d %s", r.status, r.header.Get("Content-Type"))
	}
	if r := u.get("/ui-assets/nope.js"); r.status != 404 {
		t.Errorf("missing asset: %d", r.status)
	}
}

// uiJob is a job: its run records no op when it succeeds, and one step op
// whose last attempt (20 ms) failed when n is negative.
var uiJob = trellis.NewJob("ui-double", func(_ context.Context, n int) (int, error) {
	if n < 0 {
		time.Sleep(20 * time.Millisecond)
		return 0, trellis.NonRetryable(errors.New("negative"))
	}
	return 2 * n, nil
})

// uiFlaky is a job whose first attempt fails at once and whose second, 300 ms
// later, succeeds in 20 ms.
var uiFlaky = trellis.NewJob("ui-flaky", func(ctx context.Context, _ any) (int, error) {
	if trellis.StepInfo(ctx).Attempt == 1 {
		return 0, errors.New("first attempt fails")
	}
	time.Sleep(20 * time.Millisecond)
	return 1, nil
}, trellis.JobOptions{Retry: trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Fixed(300 * time.Millisecond)}})

// manyOpsWF records uiManyOps ops.
const uiManyOps = 10_000

var manyOpsWF = trellis.NewWorkflow("many-ops", func(wc *trellis.Context, _ any) (int, error) {
	for range uiManyOps {
		wc.Now()
	}
	return uiManyOps, nil
})

// A run with 10,000 ops pages its timeline: a page shows uiOpsPageSize ops
// and links to the others.
func TestUIRunTimelinePages(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	if err := e.worker.Register(context.Background(), manyOpsWF); err != nil {
		t.Fatal(err)
	}
	run := e.start("many-ops", nil, nil)
	if r := e.waitRun(run.ID); r.Status != trellis.StatusSucceeded {
		t.Fatalf("many-ops: %s", r.Status)
	}
	u := e.uiSession("reader")
	rows := func(r *resp) int { return strings.Count(string(r.body), `<tr class="op op-`) }
	first := u.get("/ui/default/runs/"+run.ID).want(t, 200)
	if n := rows(first); n != uiOpsPageSize {
		t.Fatalf("first page shows %d ops, want %d", n, uiOpsPageSize)
	}
	pages := (uiManyOps + uiOpsPageSize - 1) / uiOpsPageSize
	for _, want := range []string{"10000 ops", "page 1 of 50", `id="ops-next"`, "?ops_page=2", "?ops_page=50"} {
		if !strings.Contains(string(first.body), want) {
			t.Errorf("first page lacks %q", want)
		}
	}
	last := u.get("/ui/default/runs/"+run.ID+"?ops_page="+strconv.Itoa(pages)).want(t, 200)
	if n := rows(last); n != uiManyOps-(pages-1)*uiOpsPageSize || !strings.Contains(string(last.body), `data-op="" data-kind="now"`) {
		t.Fatalf("last page shows %d ops", n)
	}
	if !strings.Contains(string(last.body), ">9999<") {
		t.Error("last page lacks op 9999")
	}
	// A page out of range shows the first.
	if n := rows(u.get("/ui/default/runs/"+run.ID+"?ops_page=999").want(t, 200)); n != uiOpsPageSize {
		t.Errorf("page 999 shows %d ops", n)
	}
}

// BenchmarkUIRunPage10kOps serves a page of the timeline of a run with
// 10,000 ops (reading its history and rendering 200 rows).
func BenchmarkUIRunPage10kOps(b *testing.B) {
	ctx := context.Background()
	st, err := trellis.OpenStore(ctx, "sqlite://"+filepath.Join(b.TempDir(), "t.db"), time.Now)
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	w, err := trellis.Open(ctx, trellis.Config{Backend: st, Worker: trellis.WorkerOptions{PollInterval: 20 * time.Millisecond}})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	if err := w.Register(ctx, manyOpsWF); err != nil {
		b.Fatal(err)
	}
	run, err := trellis.Start(ctx, w, manyOpsWF, nil)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := run.Result(ctx); err != nil {
		b.Fatal(err)
	}
	srv, err := New(ctx, Config{Backend: st, Listen: "127.0.0.1:0", Insecure: true, IdempotencyPurgeInterval: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Shutdown(ctx)
	path := "/ui/default/runs/" + run.ID() + "?ops_page=25"
	b.ResetTimer()
	for range b.N {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		if rec.Code != 200 {
			b.Fatalf("%d %s", rec.Code, rec.Body)
		}
	}
}

// RunCounts counts per status with the list's filters, and stops at the cap.
func TestRunCounts(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, url(t))
			for range 3 {
				e.waitRun(e.start("echo", nil, nil).ID)
			}
			e.waitRun(e.start("echo", nil, map[string]any{"queue": "q1"}).ID)
			waiting := e.start("await-go", nil, nil)
			ctx := context.Background()
			// Count once it waits: counted while it moves from pending to
			// running, it could be seen in both.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				r, err := e.st.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: waiting.ID})
				if err != nil {
					t.Fatal(err)
				}
				if r.Status == store.StatusWaiting {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the await-go run is %s, not waiting", r.Status)
				}
			}
			counter := e.st.(store.RunCounter)
			for _, tc := range []struct {
				p    store.RunCountsParams
				want map[store.Status]int64
				cap  map[store.Status]bool
			}{
				{store.RunCountsParams{Namespace: "default"}, map[store.Status]int64{store.StatusSucceeded: 4}, nil},
				{store.RunCountsParams{Namespace: "default", Queue: "q1"}, map[store.Status]int64{store.StatusSucceeded: 1}, nil},
				{store.RunCountsParams{Namespace: "default", Workflow: "await-go"}, map[store.Status]int64{}, nil},
				{store.RunCountsParams{Namespace: "default", CreatedAfter: time.Now().Add(time.Hour)}, map[store.Status]int64{}, nil},
				{store.RunCountsParams{Namespace: "default", Cap: 2}, map[store.Status]int64{store.StatusSucceeded: 3}, map[store.Status]bool{store.StatusSucceeded: true}},
				{store.RunCountsParams{Namespace: "other"}, map[store.Status]int64{}, nil},
			} {
				got, err := counter.RunCounts(ctx, &tc.p)
				if err != nil {
					t.Fatal(err)
				}
				// The await-go run is pending, running or waiting by now: count it apart.
				active := got.Counts[store.StatusPending] + got.Counts[store.StatusRunning] + got.Counts[store.StatusWaiting]
				wantActive := int64(0)
				if tc.p.Workflow == "await-go" || (tc.p.Workflow == "" && tc.p.Queue == "" && tc.p.CreatedAfter.IsZero() && tc.p.Namespace == "default") {
					wantActive = 1
				}
				if active != wantActive {
					t.Errorf("%+v: %d active, want %d", tc.p, active, wantActive)
				}
				for _, st := range store.AllStatuses {
					if st == store.StatusPending || st == store.StatusRunning || st == store.StatusWaiting {
						continue
					}
					if got.Counts[st] != tc.want[st] || got.Capped[st] != tc.cap[st] {
						t.Errorf("%+v: %s %d (capped %v), want %d (%v)", tc.p, st, got.Counts[st], got.Capped[st], tc.want[st], tc.cap[st])
					}
				}
			}
		})
	}
}

// Under Config.Insecure the UI needs no sign-in, and its forms still need the
// CSRF token of the session it hands out.
func TestUIInsecure(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.Insecure = true })
	u := e.uiSession("")
	if r := u.get("/"); r.status != 303 || r.header.Get("Location") != "/ui/default/runs" {
		t.Fatalf("/ insecure: %d %s", r.status, r.header.Get("Location"))
	}
	r := u.get("/ui/default/runs").want(t, 200)
	if !strings.Contains(string(r.body), "insecure") || strings.Contains(string(r.body), "Sign out") {
		t.Errorf("insecure runs page: %.300s", r.body)
	}
	run := e.start("await-go", nil, nil)
	path := "/ui/default/runs/" + run.ID + "/cancel"
	u.post(path, url.Values{}, e.base).want(t, 403)
	u.post(path, url.Values{"csrf": {u.csrf()}}, e.base).want(t, 303)
	if r := e.waitRun(run.ID); r.Status != trellis.StatusCancelled {
		t.Fatalf("run %s", r.Status)
	}
	// An unknown run is a 404 page.
	if r := u.get("/ui/default/runs/nope"); r.status != 404 || !strings.Contains(string(r.body), "nope") {
		t.Errorf("unknown run: %d %.300s", r.status, r.body)
	}
}

// The run page's stream is the API's, authenticated by the session: where the
// API streams, it answers text/event-stream; where it does not, 404 (the page
// then polls). A session without the reader role is refused.
func TestUIStream(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	run := e.start("echo", map[string]any{"a": 1}, nil)
	e.waitRun(run.ID)
	u := e.uiSession("reader")
	r := u.get("/ui/default/runs/" + run.ID + "/stream")
	if findRoute("GET", nsRuns+"/{id}/stream") == nil {
		if r.status != 404 {
			t.Fatalf("stream without the API's route: %d %s", r.status, r.body)
		}
	} else if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/event-stream") || !strings.Contains(string(r.body), "event: run.succeeded") {
		t.Fatalf("stream: %d %s %.500s", r.status, r.header.Get("Content-Type"), r.body)
	}
	e.uiSession("approver").get("/ui/default/runs/"+run.ID+"/stream").want(t, 403)
	if r := e.uiSession("").get("/ui/default/runs/" + run.ID + "/stream"); r.status != 303 {
		t.Fatalf("stream without a session: %d", r.status)
	}
}

// An attempt recorded lost (its worker's lease expired while the heartbeat
// reported it running) shows in the run page's timeline as lost, and in the
// API's history with its outcome.
func TestUILostAttempt(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, url(t))
			u := e.uiSession("admin")
			run := e.start("ui-lost", nil, nil)
			ctx := context.Background()
			// The claim's lease outlasts a loaded machine's pause before the
			// heartbeat (a 100 ms one had expired by then once in CI, and the
			// heartbeat, finding it lost, recorded no step); the heartbeat then
			// shortens it to 100 ms.
			p := &store.RunsClaimParams{Namespace: "default", Workflows: []string{"ui-lost"}, Worker: "gone", Max: 1,
				LeaseDuration: 10 * time.Second}
			res, err := e.st.RunsClaim(ctx, p)
			if err != nil || len(res.Runs) != 1 {
				t.Fatalf("claim: %v, %+v", err, res)
			}
			ext, err := e.st.LeasesExtend(ctx, &store.LeasesExtendParams{Duration: 100 * time.Millisecond,
				Leases: []store.Lease{res.Runs[0].Lease()}, Steps: []store.RunStep{{Name: "charge", Attempt: 1, Since: time.Now()}}})
			if err != nil || len(ext.Lost) != 0 {
				t.Fatalf("heartbeat: %+v, %v", ext, err)
			}
			time.Sleep(200 * time.Millisecond)
			p.Worker, p.LeaseDuration = "next", time.Minute
			// (Any claim in the namespace takes the run back and records the
			// attempt: the env's own worker may have.)
			if res, err = e.st.RunsClaim(ctx, p); err != nil || len(res.Runs) != 1 {
				t.Fatalf("claim after the lease expired: %v, %+v", err, res)
			}
			page := string(u.get("/ui/default/runs/" + run.ID).body)
			if !strings.Contains(page, "attempt 1 was lost") || !strings.Contains(page, `class="lost"`) {
				t.Errorf("run page lacks the lost attempt: %s", page)
			}
			hist := string(e.do("GET", "/v1/namespaces/default/runs/"+run.ID+"/history", "reader", nil).want(t, 200).body)
			if !strings.Contains(hist, `"outcome":"lost"`) {
				t.Errorf("API history lacks the lost attempt's outcome: %s", hist)
			}
		})
	}
}
