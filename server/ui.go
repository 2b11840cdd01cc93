package server

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/trellis-dev/trellis/internal/auth"
)

// The web UI (docs/ui.md): server-rendered pages under /ui/, with their
// templates, script and style embedded in the binary. Every UI route is in
// uiRouteTable with an authorization rule, checked as the API's are (scope,
// role), with the principal of the session cookie instead of a bearer token.

//go:embed uiassets
var uiAssets embed.FS

// uiRoute is one route of the web UI.
type uiRoute struct {
	method, pattern string
	public          bool      // no session needed
	role            auth.Role // the role the principal needs
	orRole          auth.Role // another role that suffices, or ""
	scope           scope
	stream          bool      // long-lived: not counted in the in-flight limit (the API's stream route has its own)
	audit           auditRule // how its requests are audited: every form (POST) is
	handle          func(s *Server, w http.ResponseWriter, r *http.Request, c *uiCall) error
}

// uiCall is a UI request after its rule was checked.
type uiCall struct {
	call
	sess *session // nil on a public route without a session
	csrf string
}

const uiNS = "/ui/{ns}"

var uiRouteTable = []uiRoute{
	{method: "GET", pattern: "/{$}", public: true, handle: (*Server).uiHome},
	{method: "GET", pattern: "/ui-assets/{file}", public: true, handle: (*Server).uiStatic},
	{method: "GET", pattern: "/ui/login", public: true, handle: (*Server).uiLoginPage},
	{method: "POST", pattern: "/ui/login", public: true, audit: auditRule{"session.login", targetSession}, handle: (*Server).uiLogin},
	{method: "POST", pattern: "/ui/logout", public: true, audit: auditRule{"session.logout", targetSession}, handle: (*Server).uiLogout},
	{method: "GET", pattern: uiNS + "/runs", role: auth.RoleReader, scope: scopeListQueue, handle: (*Server).uiRuns},
	{method: "GET", pattern: uiNS + "/runs/{id}", role: auth.RoleReader, scope: scopeRun, handle: (*Server).uiRun},
	{method: "POST", pattern: uiNS + "/runs/{id}/cancel", role: auth.RoleProducer, scope: scopeRun, audit: auditRule{"run.cancel", targetRun}, handle: (*Server).uiCancel},
	{method: "POST", pattern: uiNS + "/runs/{id}/resume", role: auth.RoleProducer, scope: scopeRun, audit: auditRule{"run.resume", targetRun}, handle: (*Server).uiResume},
	{method: "POST", pattern: uiNS + "/runs/{id}/reset", role: auth.RoleProducer, scope: scopeRun, audit: auditRule{"run.reset", targetRun}, handle: (*Server).uiReset},
	{method: "GET", pattern: uiNS + "/approvals", role: auth.RoleReader, orRole: auth.RoleApprover, scope: scopeNamespace, handle: (*Server).uiApprovals},
	{method: "POST", pattern: uiNS + "/approvals/{id}/approve", role: auth.RoleApprover, scope: scopeApproval, audit: auditRule{"approval.approve", targetApproval}, handle: (*Server).uiApprove},
	{method: "POST", pattern: uiNS + "/approvals/{id}/reject", role: auth.RoleApprover, scope: scopeApproval, audit: auditRule{"approval.reject", targetApproval}, handle: (*Server).uiReject},
	{method: "GET", pattern: uiNS + "/workers", role: auth.RoleReader, scope: scopeNamespace, handle: (*Server).uiWorkers},
	{method: "GET", pattern: uiNS + "/queues", role: auth.RoleReader, scope: scopeNamespace, handle: (*Server).uiQueues},
	{method: "POST", pattern: uiNS + "/queues/{queue}/pause", role: auth.RoleAdmin, scope: scopeNamespace, audit: auditRule{"queue.pause", targetQueue}, handle: (*Server).uiQueuePause},
	{method: "GET", pattern: uiNS + "/audit", role: auth.RoleAdmin, scope: scopeNamespace, handle: (*Server).uiAudit},
	{method: "POST", pattern: uiNS + "/queues/{queue}/resume", role: auth.RoleAdmin, scope: scopeNamespace, audit: auditRule{"queue.resume", targetQueue}, handle: (*Server).uiQueueResume},
	{method: "GET", pattern: uiNS + "/runs/{id}/stream", role: auth.RoleReader, scope: scopeRun, stream: true, handle: (*Server).uiStream},
	{method: "POST", pattern: uiNS + "/runs/{id}/event", role: auth.RoleProducer, scope: scopeRun, audit: auditRule{"run.event", targetRun}, handle: (*Server).uiSendEvent},
	{method: "GET", pattern: uiNS + "/search", role: auth.RoleReader, scope: scopeListQueue, handle: (*Server).uiSearch},
	// An approval's own page: what an approver needs to decide, without the
	// reader role on the run (ui_approval.go).
	{method: "GET", pattern: uiNS + "/approvals/{id}", role: auth.RoleApprover, orRole: auth.RoleReader, scope: scopeApproval, handle: (*Server).uiApproval},
	// Schedules: the rules of the API's schedule routes (routes.go).
	{method: "GET", pattern: uiNS + "/schedules", role: auth.RoleReader, scope: scopeNamespace, handle: (*Server).uiSchedules},
	{method: "POST", pattern: uiNS + "/schedules", role: auth.RoleAdmin, scope: scopeNamespace, audit: auditRule{"schedule.create", targetSchedule}, handle: (*Server).uiScheduleCreate},
	{method: "POST", pattern: uiNS + "/schedules/{name}/pause", role: auth.RoleAdmin, scope: scopeNamespace, audit: auditRule{"schedule.pause", targetSchedule}, handle: (*Server).uiSchedulePause},
	{method: "POST", pattern: uiNS + "/schedules/{name}/resume", role: auth.RoleAdmin, scope: scopeNamespace, audit: auditRule{"schedule.resume", targetSchedule}, handle: (*Server).uiScheduleResume},
	{method: "POST", pattern: uiNS + "/schedules/{name}/trigger", role: auth.RoleProducer, scope: scopeNamespace, audit: auditRule{"schedule.trigger", targetSchedule}, handle: (*Server).uiScheduleTrigger},
	{method: "GET", pattern: "/ui/tokens", role: auth.RoleAdmin, scope: scopeGlobal, handle: (*Server).uiTokens},
	{method: "GET", pattern: "/ui/audit", role: auth.RoleAdmin, scope: scopeGlobal, handle: (*Server).uiAuditAll},
}

// uiMaxForm caps a UI form body.
const uiMaxForm = 64 << 10

// wrapUI turns a UI route into a handler: session, rule, CSRF, then the page.
func (s *Server) wrapUI(rt uiRoute) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; form-action 'self'; frame-ancestors 'none'")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin")
		if r.Method == "POST" {
			r.Body = http.MaxBytesReader(w, r.Body, uiMaxForm)
		}
		c := &uiCall{call: call{role: rt.role}}
		if !rt.public && !rt.stream {
			select {
			case s.inFlight <- struct{}{}:
				defer func() { <-s.inFlight }()
			default:
				w.Header().Set("Retry-After", "1")
				s.uiError(w, r, c, fmt.Errorf("%w: %d requests in flight", ErrRateLimited, cap(s.inFlight)))
				return
			}
		}
		s.active.Add(1)
		defer s.active.Add(-1)
		err := s.prepareUI(w, r, rt, c)
		if c.done != nil {
			defer c.done()
		}
		if err == nil {
			err = rt.handle(s, w, r, c)
		}
		s.auditRequest(w, r, rt.audit, &c.call, "ui", err)
		var shown shownError
		if err != nil && !errors.As(err, &shown) {
			s.uiError(w, r, c, err)
		}
	})
}

// prepareUI finds the session and checks the route's rule, as prepare does for
// the API.
func (s *Server) prepareUI(w http.ResponseWriter, r *http.Request, rt uiRoute, c *uiCall) error {
	now := s.cfg.Clock.Now()
	if ck, err := r.Cookie(sessionCookie); err == nil {
		c.sess, c.principal = s.openSession(r, ck.Value, now)
	}
	if c.sess == nil && s.cfg.Insecure {
		// No authentication: every visitor is the insecure admin, with a session
		// for the CSRF token of its forms.
		c.sess, c.principal = newSession("", now), insecurePrincipal
		if err := s.setSessionCookie(w, r, c.sess); err != nil {
			return err
		}
	}
	if c.sess != nil {
		c.csrf = s.ui.csrfToken(c.sess)
	}
	if r.Method == "POST" {
		if err := parseUIForm(r); err != nil {
			return err
		}
		sess := c.sess
		if rt.pattern == "/ui/login" {
			sess = nil // no session yet: the Origin check alone
		}
		if err := s.ui.checkCSRF(r, sess, s.scheme(r)); err != nil {
			return err
		}
	}
	if rt.public {
		return nil
	}
	if c.sess == nil {
		return fmt.Errorf("%w: sign in", auth.ErrUnauthenticated)
	}
	if !rt.stream { // a stream is counted by the API's route it forwards to (uiStream)
		if err := s.allowRequest(c.principal); err != nil {
			return err
		}
	}
	if rt.scope == scopeGlobal {
		return allowGlobal(c.principal, rt.role)
	}
	c.ns = r.PathValue("ns")
	if c.ns == auth.SystemNamespace {
		return fmt.Errorf("%w: namespace %s cannot be addressed", ErrPermissionDenied, auth.SystemNamespace)
	}
	if !namespacePattern.MatchString(c.ns) {
		return fmt.Errorf("%w: malformed namespace %q", ErrInvalidArgument, c.ns)
	}
	c.role = rt.roleFor(c.principal, c.ns) // role, or orRole for a principal with only that one
	if !hasRoleIn(c.principal, c.role, c.ns) {
		return c.allowQueue("")
	}
	var err error
	if c.client, c.done, err = s.client(r.Context(), c.ns); err != nil {
		return err
	}
	return s.authorizeScope(r, rt.scope, &c.call)
}

// parseUIForm reads a form's body, so that one over uiMaxForm is refused as
// such: read later, field by field, it would be a form without fields (its
// CSRF token missing, its event name empty).
func parseUIForm(r *http.Request) error {
	err := r.ParseForm()
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return fmt.Errorf("%w: the form is larger than %d KiB", ErrBodyTooLarge, tooLarge.Limit>>10)
	case err != nil:
		return fmt.Errorf("%w: reading the form: %v", ErrInvalidArgument, err)
	}
	return nil
}

// openSession opens a session cookie: the session and its principal, or nils
// when the cookie does not open, its token no longer authenticates or it was
// signed out (the request is then signed out).
func (s *Server) openSession(r *http.Request, cookie string, now time.Time) (*session, *auth.Principal) {
	sess, err := s.ui.open(cookie, now)
	if err != nil {
		return nil, nil
	}
	p, err := s.authenticate(r.Context(), "Bearer "+sess.Token)
	if err != nil {
		return nil, nil
	}
	if err := s.checkSession(r.Context(), sess); err != nil {
		return nil, nil
	}
	return sess, p
}

// uiError answers err as a page (or, signed out on a page, a redirect to sign in).
func (s *Server) uiError(w http.ResponseWriter, r *http.Request, c *uiCall, err error) {
	if errors.Is(err, auth.ErrUnauthenticated) && r.Method == "GET" {
		http.Redirect(w, r, "/ui/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
		return
	}
	p, known := problemFor(err)
	if !known {
		s.cfg.Logger.Error("ui request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	w.Header().Set("Cache-Control", "no-store")
	setRetryAfter(w.Header(), err)
	s.render(w, r, c, p.Status, "error", p)
}

// shownError is an error a handler has answered already, with its page
// showing it (a form shown again with what was typed and why it was refused):
// it is audited as its error, and not answered a second time.
type shownError struct{ error }

func (e shownError) Unwrap() error { return e.error }

// pageData is what every template gets.
type pageData struct {
	Title     string
	NS        string
	Principal string
	CSRF      string
	NavItems  []navItem // the pages the principal may open
	Spaces    []navItem // the namespace switcher: the namespaces the principal may open a page of
	Search    *searchBox
	Insecure  bool
	Data      any
}

// NavHref is the navigation's link to the page of key ("runs", say), "" when
// the principal may not open it: a principal limited to queues gets its
// first queue's page, which a link without the filter would refuse.
func (d pageData) NavHref(key string) string {
	for _, it := range d.NavItems {
		if it.Key == key {
			return it.Href
		}
	}
	return ""
}

// uiPages are the page templates: each page's set is the shared templates with
// "content" naming the page.
var uiPages = func() map[string]*template.Template {
	base := template.Must(template.New("").Funcs(uiFuncs).ParseFS(uiAssets, "uiassets/*.html"))
	m := map[string]*template.Template{}
	for _, name := range []string{"login", "error", "runs", "run", "approvals", "workers", "queues", "audit", "tokens", "schedules", "approval", "search"} {
		t := template.Must(base.Clone())
		template.Must(t.New("content").Parse(`{{template "` + name + `" .}}`))
		m[name] = t
	}
	m["audit-all"] = m["audit"] // the whole log: the same page, its own navigation entry
	return m
}()

// render executes page name within the layout; with ?partial=1, only the page's
// live part ("<name>-live"), which the page's script polls.
func (s *Server) render(w http.ResponseWriter, r *http.Request, c *uiCall, status int, name string, data any) {
	p := pageData{Title: name, NS: c.ns, CSRF: c.csrf, Insecure: s.cfg.Insecure, Data: data}
	if p.NS == "" {
		p.NS = "default"
	}
	t := uiPages[name]
	tmpl := "layout"
	if live := name + "-live"; r.URL.Query().Get("partial") == "1" && t.Lookup(live) != nil {
		tmpl = live
	}
	if c.principal != nil {
		p.Principal = c.principal.Name
		if tmpl == "layout" { // a live part shows no navigation
			p.NavItems = navItems(c.principal, p.NS, name)
			p.Spaces = s.namespaceSwitch(r.Context(), c.principal, p.NS, name)
			p.Search = searchFor(c.principal, p.NS, r.URL.Query().Get("id"))
		}
	}
	var buf bytes.Buffer
	if err := t.ExecuteTemplate(&buf, tmpl, p); err != nil {
		s.cfg.Logger.Error("rendering ui page", "page", name, "err", err)
		http.Error(w, "internal error rendering the page", 500)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

func (s *Server) uiHome(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	if c.sess == nil {
		http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
		return nil
	}
	home := uiHomePath(c.principal)
	if home == "" {
		return errNoUIPage(c.principal)
	}
	http.Redirect(w, r, home, http.StatusSeeOther)
	return nil
}

func (s *Server) uiStatic(w http.ResponseWriter, r *http.Request, _ *uiCall) error {
	name := r.PathValue("file")
	b, err := fs.ReadFile(uiAssets, "uiassets/static/"+name)
	if err != nil || strings.Contains(name, "..") {
		return fmt.Errorf("%w: no asset %q", ErrNotFound, name)
	}
	switch {
	case strings.HasSuffix(name, ".css"):
		w.Header().Set("Content-Type", "text/css; charset=utf-8")
	case strings.HasSuffix(name, ".js"):
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
	case strings.HasSuffix(name, ".svg"):
		w.Header().Set("Content-Type", "image/svg+xml")
	}
	w.Header().Set("Cache-Control", "public, max-age=3600")
	w.Write(b)
	return nil
}

type loginData struct {
	Next, Error string
}

func (s *Server) uiLoginPage(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	s.render(w, r, c, 200, "login", loginData{Next: safeNext(r.URL.Query().Get("next"))})
	return nil
}

// uiLogin checks the token and starts a session sealing it.
func (s *Server) uiLogin(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	token := strings.TrimSpace(r.PostFormValue("token"))
	next := safeNext(r.PostFormValue("next"))
	p, err := s.authenticate(r.Context(), "Bearer "+token)
	if token == "" || err != nil {
		if err != nil && !errors.Is(err, auth.ErrUnauthenticated) {
			return err
		}
		s.render(w, r, c, 401, "login", loginData{Next: next, Error: "Unknown, revoked or expired token."})
		return nil
	}
	c.principal = p // for the audit entry of the sign-in
	if err := s.setSessionCookie(w, r, newSession(token, s.cfg.Clock.Now())); err != nil {
		return err
	}
	if next == "" {
		if next = uiHomePath(p); next == "" {
			next = "/" // which says why no page opens
		}
	}
	http.Redirect(w, r, next, http.StatusSeeOther)
	return nil
}

// safeNext keeps a post-sign-in target only when it is a path of this server.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/ui/") || strings.HasPrefix(next, "//") || strings.ContainsAny(next, "\\\r\n") {
		return ""
	}
	return next
}

// uiLogout signs out: the session is recorded as ended (ui_signout.go), so
// that its cookie, and any copy of it, is refused from now on, and the cookie
// is cleared.
func (s *Server) uiLogout(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	sess := c.sess
	if ck, err := r.Cookie(sessionCookie); sess == nil && err == nil {
		// Its token did not authenticate just now (the store did not answer,
		// say): the session is ended all the same, or it would work again.
		sess, _ = s.ui.open(ck.Value, s.cfg.Clock.Now())
	}
	if sess != nil && (c.sess != nil || !s.cfg.Insecure) {
		if err := s.endSession(r.Context(), sess, c.principal); err != nil {
			return err // a sign-out that is not recorded says so
		}
	}
	if err := s.setSessionCookie(w, r, nil); err != nil {
		return err
	}
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
	return nil
}

// uiActions: cancel, resume and reset answer with the run page.
func (s *Server) uiCancel(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	if err := c.client.Cancel(r.Context(), c.run.ID); err != nil {
		return err
	}
	http.Redirect(w, r, runPath(c.ns, c.run.ID), http.StatusSeeOther)
	return nil
}

func (s *Server) uiResume(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	if err := c.client.Resume(r.Context(), c.run.ID); err != nil {
		return err
	}
	http.Redirect(w, r, runPath(c.ns, c.run.ID), http.StatusSeeOther)
	return nil
}

func (s *Server) uiReset(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	run, err := c.client.Reset(r.Context(), c.run.ID, strings.TrimSpace(r.PostFormValue("step")))
	if err != nil {
		return err
	}
	c.noteDetail("new run %s", run.ID)
	http.Redirect(w, r, runPath(c.ns, run.ID), http.StatusSeeOther)
	return nil
}

func (s *Server) uiApprove(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	return s.uiDecide(w, r, c, true)
}

func (s *Server) uiReject(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	return s.uiDecide(w, r, c, false)
}

// uiDecide records a decision as the session's principal.
func (s *Server) uiDecide(w http.ResponseWriter, r *http.Request, c *uiCall, approve bool) error {
	if err := checkApprover(&c.call); err != nil {
		return err
	}
	comment := strings.TrimSpace(r.PostFormValue("comment"))
	if len(comment) > 4096 {
		return fmt.Errorf("%w: comment longer than 4096 bytes", ErrInvalidArgument)
	}
	decide := c.client.Reject
	if approve {
		decide = c.client.Approve
	}
	if _, err := decide(r.Context(), c.approval.ID, c.principal.Name, comment); err != nil {
		return err
	}
	if r.PostFormValue("back") == "approval" { // decided on the request's own page
		http.Redirect(w, r, approvalPath(c.ns, c.approval.ID), http.StatusSeeOther)
		return nil
	}
	http.Redirect(w, r, "/ui/"+c.ns+"/approvals", http.StatusSeeOther)
	return nil
}

// uiStream is the run's event stream for the run page: the API's
// GET /v1/namespaces/{ns}/runs/{id}/stream, authenticated by the session's
// token instead of a header the page's script could read. Where the API has no
// stream route, it answers 404 and the page polls.
func (s *Server) uiStream(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	// The session goes with the request: the stream ends when it is signed out.
	r2 := r.Clone(context.WithValue(r.Context(), uiSessionKey{}, c.sess))
	r2.URL.Path = "/v1/namespaces/" + url.PathEscape(c.ns) + "/runs/" + url.PathEscape(c.run.ID) + "/stream"
	r2.URL.RawPath = ""
	r2.RequestURI = r2.URL.RequestURI()
	r2.Header.Del("Cookie")
	r2.Header.Set("Authorization", "Bearer "+c.sess.Token)
	s.handler.ServeHTTP(w, r2)
	return nil
}

func runPath(ns, id string) string {
	return "/ui/" + url.PathEscape(ns) + "/runs/" + url.PathEscape(id)
}

// can reports whether the principal holds role on queue q of the call's namespace.
func (c *uiCall) can(role auth.Role, q string) bool {
	return c.principal.Allows(role, c.ns, q)
}
