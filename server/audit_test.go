package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/internal/clock"
	"github.com/trellis-dev/trellis/store"
)

// Every mutating route of the API and every form of the web UI is audited,
// and no read is; each rule's action is about the type of object it names.
func TestEveryChangeIsAudited(t *testing.T) {
	check := func(key, method string, rule auditRule) {
		t.Helper()
		switch {
		case (method != "GET") != rule.audited():
			t.Errorf("%s: audited %v; every change (and no read) must be: give it an audit rule", key, rule.audited())
		case rule.audited() && !strings.HasPrefix(rule.target, strings.Split(rule.action, ".")[0]):
			t.Errorf("%s: action %q does not act on its target type %q", key, rule.action, rule.target)
		}
	}
	for _, rt := range routeTable {
		check(rt.method+" "+rt.pattern, rt.method, rt.audit)
	}
	for _, rt := range uiRouteTable {
		check("web UI: "+rt.method+" "+rt.pattern, rt.method, rt.audit)
	}
}

// auditLog shuts the server down (which writes the buffered entries) and
// returns every entry of the store, by request ID.
func (e *env) auditLog() map[string]*store.AuditEntry {
	e.t.Helper()
	if err := e.srv.Shutdown(context.Background()); err != nil {
		e.t.Fatal(err)
	}
	byID := map[string]*store.AuditEntry{}
	p := store.AuditListParams{Limit: store.MaxListLimit}
	for {
		res, err := e.st.AuditList(context.Background(), &p)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, en := range res.Entries {
			if _, dup := byID[en.RequestID]; dup {
				e.t.Errorf("request %s has two audit entries", en.RequestID)
			}
			byID[en.RequestID] = en
		}
		if p.Cursor = res.NextCursor; p.Cursor == "" {
			return byID
		}
	}
}

// auditWant is the entry a request should have left.
type auditWant struct {
	r                 *resp
	action, principal string
	outcome           string
	typ, ns, id       string
	via, detailPrefix string
	noEntry           bool
}

// checkAudit checks the entry of each request of wants (found by its
// X-Request-Id), and that the log holds no other.
func checkAudit(t *testing.T, log map[string]*store.AuditEntry, wants []auditWant) {
	t.Helper()
	for _, w := range wants {
		id := w.r.header.Get(RequestIDHeader)
		en, ok := log[id]
		delete(log, id)
		if w.noEntry {
			if ok {
				t.Errorf("request %s (%d): audited %+v, want no entry", id, w.r.status, en)
			}
			continue
		}
		if !ok {
			t.Errorf("%s by %s: no entry for request %s (%d %s)", w.action, w.principal, id, w.r.status, w.r.body)
			continue
		}
		via := w.via
		if via == "" {
			via = "api"
		}
		want := store.AuditEntry{Time: en.Time, Principal: w.principal, Action: w.action,
			Target: store.AuditTarget{Namespace: w.ns, Type: w.typ, ID: w.id}, Outcome: w.outcome,
			RequestID: id, Source: "127.0.0.1", Via: via, Detail: en.Detail}
		if *en != want || !strings.HasPrefix(en.Detail, w.detailPrefix) || time.Since(en.Time) > time.Minute {
			t.Errorf("entry %+v\nwant  %+v (detail %q...)", *en, want, w.detailPrefix)
		}
	}
	for _, en := range log {
		t.Errorf("unexpected entry %+v", *en)
	}
}

// Each kind of change through the API leaves one entry with its principal,
// action, target and outcome, its request ID and source; a refused request
// leaves one with its error code; a request of no known principal leaves none;
// a retry answered from its idempotency key says so.
func TestAuditAPIChanges(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testAuditAPIChanges(t, url(t))
		})
	}
}

func testAuditAPIChanges(t *testing.T, dbURL string) {
	e := newEnv(t, dbURL)
	runs := "/v1/namespaces/default/runs"
	var wants []auditWant
	add := func(w auditWant) { wants = append(wants, w) }

	// Runs.
	r := e.do("POST", runs, "producer", map[string]any{"workflow": "await-go", "id": "a1"}).want(t, 201)
	var run trellis.Run
	r.decode(t, &run)
	add(auditWant{r: r, action: "run.start", principal: "producer", outcome: "ok", typ: "run", ns: "default", id: run.ID})
	r = e.do("POST", runs, "producer", map[string]any{"workflow": "await-go", "id": "a1"}).want(t, 409)
	add(auditWant{r: r, action: "run.start", principal: "producer", outcome: "run_exists", typ: "run", ns: "default"})
	r = e.do("POST", runs+":batch", "producer", map[string]any{"runs": []any{map[string]any{"workflow": "w"}, map[string]any{"workflow": "w", "id": "a1"}}}).want(t, 200)
	add(auditWant{r: r, action: "run.start", principal: "producer", outcome: "ok", typ: "runs", ns: "default", detailPrefix: "created 1 of 2 runs"})
	e.until(run.ID, func() bool { return e.srvRun(run.ID).Status == trellis.StatusWaiting })
	r = e.do("POST", runs+"/a1/events", "producer", map[string]any{"name": "go", "payload": "secret-payload"}).want(t, 204)
	add(auditWant{r: r, action: "run.event", principal: "producer", outcome: "ok", typ: "run", ns: "default", id: run.ID, detailPrefix: "event go"})
	e.waitRun(run.ID)
	r = e.do("POST", runs+"/a1/cancel", "producer", nil).want(t, 409)
	add(auditWant{r: r, action: "run.cancel", principal: "producer", outcome: "run_finished", typ: "run", ns: "default", id: run.ID})
	r = e.do("POST", runs+"/a1/reset", "producer", map[string]any{}).want(t, 201)
	var reset trellis.Run
	r.decode(t, &reset)
	add(auditWant{r: r, action: "run.reset", principal: "producer", outcome: "ok", typ: "run", ns: "default", id: run.ID, detailPrefix: "new run " + reset.ID})
	r = e.do("POST", runs+"/"+reset.ID+"/cancel", "reader", nil).want(t, 403)
	add(auditWant{r: r, action: "run.cancel", principal: "reader", outcome: "permission_denied", typ: "run", ns: "default", id: reset.ID})
	r = e.do("POST", runs+"/"+reset.ID+"/cancel", "", nil).want(t, 401)
	add(auditWant{r: r, noEntry: true})
	r = e.do("POST", runs+"/"+reset.ID+"/cancel", "producer", nil).want(t, 200)
	add(auditWant{r: r, action: "run.cancel", principal: "producer", outcome: "ok", typ: "run", ns: "default", id: reset.ID})
	e.waitRun(reset.ID)
	r = e.do("POST", runs+"/"+reset.ID+"/resume", "producer", nil).want(t, 409)
	add(auditWant{r: r, action: "run.resume", principal: "producer", outcome: "run_finished", typ: "run", ns: "default", id: reset.ID})
	r = e.do("DELETE", runs+"/"+reset.ID, "admin", nil).want(t, 204)
	add(auditWant{r: r, action: "run.delete", principal: "root", outcome: "ok", typ: "run", ns: "default", id: reset.ID})
	r = e.do("POST", runs+"/no%7Fsuch/cancel", "producer", nil).want(t, 400)
	add(auditWant{r: r, action: "run.cancel", principal: "producer", outcome: "invalid_argument", typ: "run", ns: "default", id: "no\x7fsuch"})

	// A retry answered from its key changed nothing, and says so.
	first := e.keyed("POST", runs, "producer", "k1", map[string]any{"workflow": "w"}).want(t, 201)
	var keyedRun trellis.Run
	first.decode(t, &keyedRun)
	add(auditWant{r: first, action: "run.start", principal: "producer", outcome: "ok", typ: "run", ns: "default", id: keyedRun.ID})
	again := e.keyed("POST", runs, "producer", "k1", map[string]any{"workflow": "w"}).replayed(t, true)
	// (A start's replay comes from the store's record: its run is not read again.)
	add(auditWant{r: again, action: "run.start", principal: "producer", outcome: "ok", typ: "run", ns: "default", detailPrefix: "idempotent replay"})

	// Approvals.
	var appRun trellis.Run
	r = e.do("POST", runs, "producer", map[string]any{"workflow": "needs-anyone"}).want(t, 201)
	r.decode(t, &appRun)
	add(auditWant{r: r, action: "run.start", principal: "producer", outcome: "ok", typ: "run", ns: "default", id: appRun.ID})
	approval := e.pendingApproval(appRun.ID)
	r = e.do("POST", "/v1/namespaces/default/approvals/"+approval+"/approve", "approver", map[string]any{"comment": "fine"}).want(t, 200)
	add(auditWant{r: r, action: "approval.approve", principal: "approver", outcome: "ok", typ: "approval", ns: "default", id: approval})
	r = e.do("POST", "/v1/namespaces/default/approvals/"+approval+"/reject", "approver", nil).want(t, 409)
	add(auditWant{r: r, action: "approval.reject", principal: "approver", outcome: "approval_decided", typ: "approval", ns: "default", id: approval})

	// Namespaces and queues.
	r = e.do("POST", "/v1/namespaces", "admin", map[string]any{"name": "shop"}).want(t, 201)
	add(auditWant{r: r, action: "namespace.create", principal: "root", outcome: "ok", typ: "namespace", ns: "shop", id: "shop"})
	r = e.do("POST", "/v1/namespaces", "reader", map[string]any{"name": "shop2"}).want(t, 403)
	add(auditWant{r: r, action: "namespace.create", principal: "reader", outcome: "permission_denied", typ: "namespace"})
	r = e.do("PATCH", "/v1/namespaces/shop", "admin", map[string]any{"retention": "48h"}).want(t, 200)
	add(auditWant{r: r, action: "namespace.update", principal: "root", outcome: "ok", typ: "namespace", ns: "shop", id: "shop"})
	r = e.do("POST", "/v1/namespaces/shop/queues", "admin", map[string]any{"name": "emails"}).want(t, 201)
	add(auditWant{r: r, action: "queue.create", principal: "root", outcome: "ok", typ: "queue", ns: "shop", id: "emails"})
	r = e.do("PATCH", "/v1/namespaces/shop/queues/emails", "admin", map[string]any{"concurrency_limit": 3}).want(t, 200)
	add(auditWant{r: r, action: "queue.update", principal: "root", outcome: "ok", typ: "queue", ns: "shop", id: "emails"})
	r = e.do("POST", "/v1/namespaces/shop/queues/emails/pause", "admin", nil).want(t, 200)
	add(auditWant{r: r, action: "queue.pause", principal: "root", outcome: "ok", typ: "queue", ns: "shop", id: "emails"})
	r = e.do("POST", "/v1/namespaces/shop/queues/emails/resume", "admin", nil).want(t, 200)
	add(auditWant{r: r, action: "queue.resume", principal: "root", outcome: "ok", typ: "queue", ns: "shop", id: "emails"})

	// Schedules.
	sched := "/v1/namespaces/default/schedules"
	spec := map[string]any{"workflow": "echo", "cron": "0 3 * * *"}
	r = e.do("POST", sched, "admin", map[string]any{"name": "nightly", "spec": spec, "paused": true}).want(t, 201)
	add(auditWant{r: r, action: "schedule.create", principal: "root", outcome: "ok", typ: "schedule", ns: "default", id: "nightly"})
	r = e.do("PUT", sched+"/nightly", "admin", map[string]any{"workflow": "echo", "cron": "0 4 * * *"}).want(t, 200)
	add(auditWant{r: r, action: "schedule.update", principal: "root", outcome: "ok", typ: "schedule", ns: "default", id: "nightly"})
	r = e.do("POST", sched+"/nightly/resume", "admin", nil).want(t, 200)
	add(auditWant{r: r, action: "schedule.resume", principal: "root", outcome: "ok", typ: "schedule", ns: "default", id: "nightly"})
	r = e.do("POST", sched+"/nightly/pause", "admin", nil).want(t, 200)
	add(auditWant{r: r, action: "schedule.pause", principal: "root", outcome: "ok", typ: "schedule", ns: "default", id: "nightly"})
	r = e.do("POST", sched+"/nightly/trigger", "producer", nil).want(t, 201)
	var fired trellis.Run
	r.decode(t, &fired)
	add(auditWant{r: r, action: "schedule.trigger", principal: "producer", outcome: "ok", typ: "schedule", ns: "default", id: "nightly", detailPrefix: "run " + fired.ID})
	r = e.do("POST", sched+"/nightly/backfill", "admin", map[string]any{"start": "2026-01-01T00:00:00Z", "end": "2026-01-03T00:00:00Z"}).want(t, 200)
	add(auditWant{r: r, action: "schedule.backfill", principal: "root", outcome: "ok", typ: "schedule", ns: "default", id: "nightly", detailPrefix: "2 runs"})
	r = e.do("DELETE", sched+"/nightly", "admin", nil).want(t, 204)
	add(auditWant{r: r, action: "schedule.delete", principal: "root", outcome: "ok", typ: "schedule", ns: "default", id: "nightly"})

	// Tokens: no namespace; the grants, never the secret.
	r = e.do("POST", "/v1/tokens", "admin", map[string]any{"name": "ci", "grants": []map[string]any{{"role": "producer", "namespace": "shop", "queue": "emails"}}}).want(t, 201)
	var created CreatedToken
	r.decode(t, &created)
	add(auditWant{r: r, action: "token.create", principal: "root", outcome: "ok", typ: "token", id: "ci", detailPrefix: "grants producer:shop:emails"})
	r = e.do("POST", "/v1/tokens/ci/revoke", "admin", nil).want(t, 200)
	add(auditWant{r: r, action: "token.revoke", principal: "root", outcome: "ok", typ: "token", id: "ci"})
	r = e.do("POST", "/v1/tokens/ci/revoke", "producer", nil).want(t, 403)
	add(auditWant{r: r, action: "token.revoke", principal: "producer", outcome: "permission_denied", typ: "token", id: "ci"})

	// Reads leave nothing.
	add(auditWant{r: e.do("GET", runs, "reader", nil).want(t, 200), noEntry: true})
	log := e.auditLog()
	for _, en := range log {
		if strings.Contains(en.Detail, created.Secret) || strings.Contains(en.Detail, "secret-payload") {
			t.Errorf("entry %+v holds a secret or a payload", *en)
		}
	}
	checkAudit(t, log, wants)
}

// srvRun reads a run from the store.
func (e *env) srvRun(id string) *trellis.Run {
	e.t.Helper()
	var run trellis.Run
	e.do("GET", "/v1/namespaces/default/runs/"+id, "reader", nil).want(e.t, 200).decode(e.t, &run)
	return &run
}

// The web UI's forms are audited as the API's requests are, via "ui", with
// the principal of the session: sign-in and sign-out too. A form refused by
// its CSRF check is audited with its code; a sign-in with a bad token leaves
// nothing (no principal).
func TestAuditUIChanges(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	walkQueue(t, e)
	var wants []auditWant
	add := func(w auditWant) { wants = append(wants, w) }
	u := e.uiSession("")
	r := u.post("/ui/login", url.Values{"token": {"wrong"}}, e.base)
	add(auditWant{r: r, noEntry: true})
	r = u.post("/ui/login", url.Values{"token": {"admin"}}, e.base)
	add(auditWant{r: r, action: "session.login", principal: "root", outcome: "ok", typ: "session", via: "ui"})
	var run trellis.Run
	r = e.do("POST", "/v1/namespaces/default/runs", "producer", map[string]any{"workflow": "await-go"}).want(t, 201)
	r.decode(t, &run)
	add(auditWant{r: r, action: "run.start", principal: "producer", outcome: "ok", typ: "run", ns: "default", id: run.ID})
	r = u.post("/ui/default/runs/"+run.ID+"/cancel", url.Values{"csrf": {u.csrf()}}, e.base)
	add(auditWant{r: r, action: "run.cancel", principal: "root", outcome: "ok", typ: "run", ns: "default", id: run.ID, via: "ui"})
	r = u.post("/ui/default/queues/walk-q/pause", url.Values{"csrf": {"forged"}}, e.base)
	add(auditWant{r: r, action: "queue.pause", principal: "root", outcome: "permission_denied", typ: "queue", ns: "default", id: "walk-q", via: "ui"})
	r = u.post("/ui/default/queues/walk-q/pause", url.Values{"csrf": {u.csrf()}}, e.base)
	add(auditWant{r: r, action: "queue.pause", principal: "root", outcome: "ok", typ: "queue", ns: "default", id: "walk-q", via: "ui"})
	e.waitRun(run.ID)
	r = u.post("/ui/default/runs/"+run.ID+"/reset", url.Values{"csrf": {u.csrf()}}, e.base)
	loc := r.header.Get("Location")
	add(auditWant{r: r, action: "run.reset", principal: "root", outcome: "ok", typ: "run", ns: "default", id: run.ID, via: "ui",
		detailPrefix: "new run " + loc[strings.LastIndex(loc, "/")+1:]})
	add(auditWant{r: u.get("/ui/default/runs"), noEntry: true})
	r = u.post("/ui/logout", url.Values{"csrf": {u.csrf()}}, e.base)
	add(auditWant{r: r, action: "session.logout", principal: "root", outcome: "ok", typ: "session", via: "ui"})
	checkAudit(t, e.auditLog(), wants)
}

// Entries are written in batches off the requests' path: none before the
// flush interval, all of them at Shutdown.
func TestAuditFlushedOnShutdown(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.AuditFlushInterval = time.Hour })
	for range 20 {
		e.do("POST", "/v1/namespaces/default/runs", "producer", map[string]any{"workflow": "w"}).want(t, 201)
	}
	res, err := e.st.AuditList(t.Context(), &store.AuditListParams{})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Entries) != 0 {
		t.Fatalf("%d entries written before the flush interval, want none (batched)", len(res.Entries))
	}
	if n := len(e.auditLog()); n != 20 {
		t.Fatalf("%d entries after Shutdown, want 20", n)
	}
}

// The flush interval writes the buffered entries while the server runs: not
// before it has passed on the server's clock (a fake one here), at once when
// it has.
func TestAuditFlushedOnTick(t *testing.T) {
	const every = 7*time.Minute + 3*time.Second // no other timer of the server's
	clk := clock.NewFake(time.Now())
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.AuditFlushInterval, c.Clock = every, clk })
	entries := func() int {
		res, err := e.st.AuditList(t.Context(), &store.AuditListParams{})
		if err != nil {
			t.Fatal(err)
		}
		return len(res.Entries)
	}
	waitTimerAt(t, clk, clk.Now().Add(every)) // the flush loop waits for its tick
	e.do("POST", "/v1/namespaces/default/runs", "producer", map[string]any{"workflow": "w"}).want(t, 201)
	// The entry is buffered once the request is answered (and may be just
	// after its answer is read).
	waitFor(t, "the entry buffered", func() bool {
		e.srv.auditor.mu.Lock()
		defer e.srv.auditor.mu.Unlock()
		return len(e.srv.auditor.buf) == 1
	})
	if n := entries(); n != 0 {
		t.Fatalf("%d entries written before the flush interval passed", n)
	}
	clk.Advance(every)
	waitTimerAt(t, clk, clk.Now().Add(every)) // the flush is done: the loop waits for its next tick
	if n := entries(); n != 1 {
		t.Fatalf("%d entries written after the flush interval, want 1", n)
	}
}

// failingAudit is a store whose audit appends fail while fail is set: the
// store of a server whose database is away.
type failingAudit struct {
	store.Store
	fail chan bool // receives whether the next append fails
}

func (f failingAudit) AuditAppend(ctx context.Context, p *store.AuditAppendParams) error {
	if <-f.fail {
		return errors.New("the store is away")
	}
	return f.Store.AuditAppend(ctx, p)
}

// slowAudit is a store whose audit appends wait for release and then write
// whatever their caller's context has become, as a store's group commit does
// with a batch under way; entered receives each append's start.
type slowAudit struct {
	store.Store
	entered, release chan struct{}
}

func (f slowAudit) AuditAppend(ctx context.Context, p *store.AuditAppendParams) error {
	f.entered <- struct{}{}
	<-f.release
	if err := f.Store.AuditAppend(context.Background(), p); err != nil {
		return err
	}
	return ctx.Err() // written, but the caller that left is told it was not
}

// Stopping while the loop's flush is under way lets it end and writes each
// entry once: the flush cancelled at Shutdown had its entries written twice
// (its write committed, its entries went back to the buffer, and stop wrote
// them again; TestAuditAPIChanges/postgres saw it on a loaded machine). When
// Shutdown's context ends first, the flush is cancelled and nothing more is
// written.
func TestAuditShutdownDuringFlushWritesOnce(t *testing.T) {
	for _, late := range []bool{false, true} {
		st, err := trellis.OpenStore(t.Context(), storeURLs(t)["sqlite"](t), time.Now)
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		f := slowAudit{Store: st, entered: make(chan struct{}, 10), release: make(chan struct{})}
		m := trellis.NewMetrics()
		a, err := newAuditor(f, Config{Logger: discardLogger(), AuditFlushInterval: time.Millisecond, AuditBuffer: 100,
			Clock: clock.Real{}}, m.Registry())
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			a.add(store.AuditEntry{Time: time.Now(), Principal: "p", Action: "run.cancel", Outcome: "ok",
				RequestID: fmt.Sprint("r", i), Target: store.AuditTarget{Namespace: "default", Type: "run", ID: fmt.Sprint(i)}})
		}
		a.start()
		<-f.entered // the loop's flush is under way
		ctx, cancel := context.WithCancel(t.Context())
		stopped := make(chan error, 1)
		go func() { stopped <- a.stop(ctx) }()
		time.Sleep(50 * time.Millisecond) // stop waits for the flush
		if late {
			cancel()
			time.Sleep(50 * time.Millisecond)
		}
		close(f.release)
		err = <-stopped
		cancel()
		if late != (err != nil) {
			t.Errorf("late %v: stop: %v", late, err)
		}
		res, err := st.AuditList(t.Context(), &store.AuditListParams{})
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Entries) != 5 {
			t.Errorf("late %v: %d entries written, want each of the 5 once", late, len(res.Entries))
		}
	}
}

// A failed write keeps the entries for the next one; a full buffer drops the
// newest entries and counts them.
func TestAuditBufferKeepsAndDrops(t *testing.T) {
	st, err := trellis.OpenStore(t.Context(), storeURLs(t)["sqlite"](t), time.Now)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	f := failingAudit{Store: st, fail: make(chan bool, 1)}
	m := trellis.NewMetrics()
	a, err := newAuditor(f, Config{Logger: discardLogger(), AuditFlushInterval: time.Hour, AuditBuffer: 3}, m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	entry := func(id string) store.AuditEntry {
		return store.AuditEntry{Time: time.Now(), Principal: "p", Action: "run.cancel", Outcome: "ok",
			Target: store.AuditTarget{Namespace: "default", Type: "run", ID: id}}
	}
	a.add(entry("1"))
	a.add(entry("2"))
	f.fail <- true
	if err := a.flush(t.Context()); err == nil {
		t.Fatal("a flush to a failing store reported no error")
	}
	a.add(entry("3"))
	a.add(entry("4")) // the buffer holds 3: dropped
	f.fail <- false
	if err := a.flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	res, err := st.AuditList(t.Context(), &store.AuditListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, en := range res.Entries {
		ids = append(ids, en.Target.ID)
	}
	if strings.Join(ids, ",") != "3,2,1" {
		t.Fatalf("entries written %v, want 3,2,1 (newest first)", ids)
	}
	if got := counterValue(t, m, "trellis_audit_entries_dropped_total"); got != 1 {
		t.Errorf("dropped counter %v, want 1", got)
	}
	if got := counterValue(t, m, "trellis_audit_entries_written_total"); got != 3 {
		t.Errorf("written counter %v, want 3", got)
	}
	close(f.fail) // the next appends (none) would not fail
	if err := a.stop(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// GET /v1/audit lists every entry to an admin of every namespace, with
// filters and pages; GET /v1/namespaces/{ns}/audit lists one namespace's to
// its admin, never another's nor the tokens'.
func TestAuditListRoutes(t *testing.T) {
	toks := testTokens()
	toks["ns-admin"] = &auth.Principal{Name: "nsadmin", Grants: []auth.Grant{{Role: auth.RoleAdmin, Namespace: "default"}}}
	toks["q-admin"] = &auth.Principal{Name: "qadmin", Grants: []auth.Grant{{Role: auth.RoleAdmin, Namespace: "default", Queue: "q1"}}}
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) {
		c.Authenticator = toks
		c.AuditFlushInterval = 10 * time.Millisecond
	})
	t0 := time.Now().UTC()
	for range 3 {
		e.do("POST", "/v1/namespaces/default/runs", "producer", map[string]any{"workflow": "w"}).want(t, 201)
	}
	e.do("POST", "/v1/namespaces", "admin", map[string]any{"name": "shop"}).want(t, 201)
	e.do("POST", "/v1/namespaces/shop/queues", "admin", map[string]any{"name": "q"}).want(t, 201)
	e.do("POST", "/v1/tokens", "admin", map[string]any{"name": "t1", "grants": []map[string]any{{"role": "reader", "namespace": "shop"}}}).want(t, 201)
	list := func(path, token string) AuditList {
		t.Helper()
		var l AuditList
		e.do("GET", path, token, nil).want(t, 200).decode(t, &l)
		return l
	}
	// Wait for the six entries to be written.
	deadline := time.Now().Add(10 * time.Second)
	for len(list("/v1/audit", "admin").Entries) < 6 {
		if time.Now().After(deadline) {
			t.Fatal("entries not written")
		}
		time.Sleep(10 * time.Millisecond)
	}
	all := list("/v1/audit", "admin")
	if len(all.Entries) != 6 || all.Entries[0].Action != "token.create" || all.Entries[5].Action != "run.start" {
		t.Fatalf("GET /v1/audit: %+v", all.Entries)
	}
	var pages []string
	for tok := ""; ; {
		l := list("/v1/audit?limit=4&page_token="+tok, "admin")
		for _, en := range l.Entries {
			pages = append(pages, en.RequestID)
		}
		if tok = l.NextPageToken; tok == "" {
			break
		}
	}
	if len(pages) != 6 || pages[0] != all.Entries[0].RequestID || pages[5] != all.Entries[5].RequestID {
		t.Errorf("pages of 4: %v", pages)
	}
	// A page token is opaque and bound to its list's namespace and filter.
	first := list("/v1/audit?limit=1&action=run.start", "admin")
	if first.NextPageToken == "" || strings.ContainsAny(first.NextPageToken, "0123456789") && len(first.NextPageToken) < 16 {
		t.Fatalf("page token %q", first.NextPageToken)
	}
	list("/v1/audit?limit=1&action=run.start&page_token="+first.NextPageToken, "admin")
	for _, other := range []string{"/v1/audit?action=token.*&page_token=", "/v1/namespaces/default/audit?page_token=",
		"/v1/audit?namespace=shop&action=run.start&page_token="} {
		e.do("GET", other+first.NextPageToken, "admin", nil).problem(t, 400, "invalid_argument")
	}
	for path, n := range map[string]int{
		"/v1/audit?namespace=default":                                      3,
		"/v1/audit?namespace=shop":                                         2,
		"/v1/audit?action=token.*":                                         1,
		"/v1/audit?action=run.start&principal=producer":                    3,
		"/v1/audit?principal=root":                                         3,
		"/v1/audit?since=" + t0.Add(-time.Minute).Format(time.RFC3339Nano): 6,
		"/v1/audit?until=" + t0.Add(-time.Minute).Format(time.RFC3339Nano): 0,
		"/v1/namespaces/default/audit":                                     3,
		"/v1/namespaces/shop/audit?action=queue.create":                    1,
	} {
		if got := len(list(path, "admin").Entries); got != n {
			t.Errorf("GET %s: %d entries, want %d", path, got, n)
		}
	}
	// An admin of one namespace reads that namespace's entries only.
	if got := list("/v1/namespaces/default/audit", "ns-admin"); len(got.Entries) != 3 {
		t.Errorf("namespace admin: %d entries, want 3", len(got.Entries))
	}
	e.do("GET", "/v1/namespaces/shop/audit", "ns-admin", nil).problem(t, 403, "permission_denied")
	e.do("GET", "/v1/audit", "ns-admin", nil).problem(t, 403, "permission_denied")
	e.do("GET", "/v1/namespaces/default/audit", "q-admin", nil).problem(t, 403, "permission_denied")
	e.do("GET", "/v1/namespaces/default/audit", "reader", nil).problem(t, 403, "permission_denied")
	// Bad filters are refused.
	for _, q := range []string{"since=yesterday", "limit=0", "page_token=x", "action=*", "namespace=a&namespace=b", "queue=q",
		"since=2026-01-02T00:00:00Z&until=2026-01-01T00:00:00Z"} {
		e.do("GET", "/v1/audit?"+q, "admin", nil).problem(t, 400, "invalid_argument")
	}
}

// counterValue reads counter name from m's registry: without labels, the
// family's only counter; with labels (name, value pairs), the counter that
// carries them, 0 when none does yet.
func counterValue(t *testing.T, m *trellis.Metrics, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		if len(labels) == 0 && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
		for _, c := range mf.GetMetric() {
			has := map[string]string{}
			for _, l := range c.GetLabel() {
				has[l.GetName()] = l.GetValue()
			}
			matches := len(labels) > 0
			for i := 0; i+1 < len(labels); i += 2 {
				matches = matches && has[labels[i]] == labels[i+1]
			}
			if matches {
				return c.GetCounter().GetValue()
			}
		}
	}
	if len(labels) > 0 {
		return 0
	}
	t.Fatalf("no counter %s", name)
	return 0
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

// The web UI's audit page shows the namespace's entries to its admin, with
// the API's filters; another namespace's entries and the tokens' are not
// there.
func TestUIAuditPage(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t))
	run := e.start("await-go", nil, nil)
	e.do("POST", "/v1/namespaces/default/runs/"+run.ID+"/cancel", "producer", nil).want(t, 200)
	e.do("POST", "/v1/namespaces", "admin", map[string]any{"name": "other"}).want(t, 201)
	e.do("POST", "/v1/namespaces/other/queues", "admin", map[string]any{"name": "elsewhere"}).want(t, 201)
	e.do("POST", "/v1/tokens", "admin", map[string]any{"name": "tk", "grants": []map[string]any{{"role": "reader", "namespace": "default"}}}).want(t, 201)
	u := e.uiSession("admin")
	if err := e.srv.auditor.flush(t.Context()); err != nil { // as the next tick would
		t.Fatal(err)
	}
	page := string(u.get("/ui/default/audit").want(t, 200).body)
	for _, want := range []string{`data-action="run.start"`, `data-action="run.cancel"`, run.ID[:14], `data-nav="audit"`} {
		if !strings.Contains(page, want) {
			t.Errorf("audit page lacks %s", want)
		}
	}
	for _, not := range []string{"queue.create", "elsewhere", "token.create", "namespace.create", "session.login"} {
		if strings.Contains(page, not) {
			t.Errorf("the audit page of namespace default shows %s", not)
		}
	}
	filtered := string(u.get("/ui/default/audit?action=run.cancel").want(t, 200).body)
	if strings.Count(filtered, "data-action=") != 1 || !strings.Contains(filtered, `data-action="run.cancel"`) {
		t.Errorf("filtered on run.cancel: %s", filtered)
	}
	u.get("/ui/default/audit?since=yesterday").want(t, 400)
	if r := e.uiSession("reader").get("/ui/default/audit"); r.status != 403 {
		t.Errorf("a reader opened the audit page: %d", r.status)
	}
}

// No token can flood the audit log with refusals: a principal's refused
// changes are audited a few a second (auditRefusalBurst, then
// auditRefusalRate), requests refused by a cap not at all, and its successful
// changes always.
func TestAuditRefusalsBounded(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.AuditFlushInterval = time.Hour; c.PrincipalRate, c.PrincipalBurst = 1, 600 })
	const refused = 500
	for range refused { // producer of default, not of namespace other
		e.do("POST", "/v1/namespaces/other/runs", "producer", map[string]any{"workflow": "w"}).want(t, 403)
	}
	e.do("POST", "/v1/namespaces/default/runs", "producer", map[string]any{"workflow": "w"}).want(t, 201)
	for e.do("POST", "/v1/namespaces/default/runs", "producer", map[string]any{"workflow": "w"}).status != 429 {
	}
	denied, ok, limited := 0, 0, 0
	for _, en := range e.auditLog() {
		switch en.Outcome {
		case "permission_denied":
			denied++
		case "ok":
			ok++
		case "rate_limited":
			limited++
		}
	}
	if denied < auditRefusalBurst || denied > auditRefusalBurst+auditRefusalRate*5 || limited != 0 || ok < 2 {
		t.Fatalf("%d refused requests audited as %d entries (want about %d), %d rate_limited (want 0), %d ok",
			refused, denied, auditRefusalBurst, limited, ok)
	}
}

// The whole log's page, for an admin of every namespace: entries of every
// namespace and of none (tokens, sign-ins), with a namespace filter; a
// namespace's admin may not open it.
func TestUIAuditAllPage(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) {
		c.Authenticator = tokens{"admin": testTokens()["admin"],
			"default-admin": {Name: "dadmin", Grants: []auth.Grant{{Role: auth.RoleAdmin, Namespace: "default"}}}}
	})
	e.do("POST", "/v1/namespaces", "admin", map[string]any{"name": "other"}).want(t, 201)
	e.do("POST", "/v1/namespaces/other/queues", "admin", map[string]any{"name": "elsewhere"}).want(t, 201)
	e.do("POST", "/v1/tokens", "admin", map[string]any{"name": "tk", "grants": []map[string]any{{"role": "reader", "namespace": "default"}}}).want(t, 201)
	u := e.uiSession("admin")
	if err := e.srv.auditor.flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	page := string(u.get("/ui/audit").want(t, 200).body)
	for _, want := range []string{`data-action="token.create"`, `data-action="queue.create"`, `data-action="namespace.create"`,
		`data-nav="audit-all" class="on"`, `id="f-namespace"`} {
		if !strings.Contains(page, want) {
			t.Errorf("the whole log's page lacks %s", want)
		}
	}
	other := string(u.get("/ui/audit?namespace=other").want(t, 200).body)
	if !strings.Contains(other, `data-action="queue.create"`) || strings.Contains(other, "token.create") {
		t.Errorf("filtered on namespace other: %s", other)
	}
	if r := e.uiSession("default-admin").get("/ui/audit"); r.status != 403 {
		t.Errorf("a namespace's admin opened the whole log: %d", r.status)
	}
}
