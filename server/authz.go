package server

import (
	"github.com/trellis-dev/trellis/store/blobs"

	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// call is what the middleware found out about a request before its handler runs.
type call struct {
	principal *auth.Principal
	role      auth.Role
	ns        string
	client    *trellis.Client
	done      func()
	run       *trellis.Run            // scopeRun (and scopeRunLazy, unless nil): the run {id} names
	approval  *trellis.ApprovalRecord // scopeApproval: approval {id}
	keyed     *keyed                  // a request with an Idempotency-Key on a route that takes one (see handle)
	// streamOwned: a stream's own goroutine took over the connection and its
	// count in MaxStreams (streamRun).
	streamOwned bool
	note        auditNote // what the handler adds to the request's audit entry
	// streamEnd closes when the server ends the stream (its credential no
	// longer authenticates); streamClose unregisters it (registerSSE). Both
	// nil under Insecure.
	streamEnd   <-chan struct{}
	streamClose func()
}

// allowQueue checks the call's role on queue q of its namespace.
func (c *call) allowQueue(q string) error {
	if c.principal.Allows(c.role, c.ns, q) {
		return nil
	}
	where := fmt.Sprintf("namespace %q", c.ns)
	if q != "" {
		where += fmt.Sprintf(" queue %q", q)
	}
	return fmt.Errorf("%w: principal %q has no %s grant on %s", ErrPermissionDenied, c.principal.Name, c.role, where)
}

// insecurePrincipal is who every request acts as under Config.Insecure.
var insecurePrincipal = &auth.Principal{Name: "insecure",
	Grants: []auth.Grant{{Role: auth.RoleAdmin, Namespace: auth.AllNamespaces}}}

// wrap turns a route into a handler: authenticate, authorize, then handle.
func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := &call{role: rt.role}
		if rt.stream {
			if n := s.streams.Add(1); n > int64(s.cfg.MaxStreams) {
				s.streams.Add(-1)
				w.Header().Set("Retry-After", "1")
				s.writeError(w, r, fmt.Errorf("%w: %d streams open", ErrRateLimited, s.cfg.MaxStreams))
				return
			}
			defer func() {
				if !c.streamOwned { // else the stream's goroutine counts it (streamRun)
					s.streams.Add(-1)
					if c.streamClose != nil {
						c.streamClose()
					}
				}
			}()
		} else if !rt.public {
			select {
			case s.inFlight <- struct{}{}:
				defer func() { <-s.inFlight }()
			default:
				w.Header().Set("Retry-After", "1")
				s.writeError(w, r, fmt.Errorf("%w: %d requests in flight", ErrRateLimited, cap(s.inFlight)))
				return
			}
		}
		s.active.Add(1) // after the slot: a request counted here holds one
		defer s.active.Add(-1)
		err := s.prepare(r, rt, c)
		if c.done != nil { // set by prepare, even when it then refuses
			defer c.done()
		}
		if err != nil {
			err = s.replayGone(w, r, rt, c, err)
		} else {
			err = s.handle(w, r, rt, c)
		}
		s.auditRequest(w, r, rt.audit, c, "api", err)
		if err != nil {
			s.writeError(w, r, err)
		}
	})
}

// prepare authenticates the request and checks the route's rule (see scope).
func (s *Server) prepare(r *http.Request, rt route, c *call) error {
	if q := parseQuery(r, rt.query); q.err != nil {
		return q.err
	}
	if rt.public {
		return nil
	}
	p, err := s.authenticate(r.Context(), r.Header.Get("Authorization"))
	if err != nil {
		return err
	}
	c.principal = p
	if err := s.allowRequest(p); err != nil {
		return err
	}
	if rt.scope == scopeGlobal {
		return allowGlobal(p, rt.role)
	}
	c.ns = r.PathValue("ns")
	if c.ns == auth.SystemNamespace {
		return fmt.Errorf("%w: namespace %s cannot be addressed", ErrPermissionDenied, auth.SystemNamespace)
	}
	if !namespacePattern.MatchString(c.ns) {
		return fmt.Errorf("%w: malformed namespace %q", ErrInvalidArgument, c.ns)
	}
	if !hasRoleIn(p, rt.role, c.ns) {
		return c.allowQueue("")
	}
	if c.client, c.done, err = s.client(r.Context(), c.ns); err != nil {
		return err
	}
	if err := s.authorizeScope(r, rt.scope, c); err != nil {
		return err
	}
	if rt.stream {
		return s.registerSSE(r, c)
	}
	return nil
}

// authorizeScope checks the role on the queue the route's scope names.
func (s *Server) authorizeScope(r *http.Request, sc scope, c *call) error {
	ctx := r.Context()
	switch sc {
	case scopeNamespace:
		return c.allowQueue("")
	case scopeListQueue:
		return c.allowQueue(r.URL.Query().Get("queue"))
	case scopeBodyQueue:
		return nil // the handler checks the queue its body names
	case scopeRunsQuery:
		return nil // the handler checks the queues of the runs it names (waitruns.go)
	case scopeRun, scopeRunLazy:
		id := r.PathValue("id")
		if err := checkRef("run ID", id); err != nil {
			return err
		}
		if sc == scopeRunLazy && c.allowQueue("") == nil {
			return nil // any run of the namespace is allowed: the handler reads it
		}
		gctx := ctx
		if r.Method != http.MethodGet || !strings.HasSuffix(r.Pattern, "/runs/{id}") && !strings.HasSuffix(r.Pattern, "/runs/{id}/result") {
			// The handler does not answer the run (its page or its result):
			// its payloads stored apart are not read (docs/payloads.md).
			gctx = blobs.WithOmitLarge(ctx)
		}
		run, err := c.client.Get(gctx, id)
		if err != nil {
			return absent(err, store.RunNotFound(c.ns, id))
		}
		c.run = run
		return c.allowQueue(run.Queue)
	case scopeApproval:
		id := r.PathValue("id")
		if err := checkRef("approval ID", id); err != nil {
			return err
		}
		a, err := c.client.GetApproval(ctx, id)
		if err != nil {
			return absent(err, store.ApprovalNotFound(c.ns, id))
		}
		run, err := c.client.Get(ctx, a.RunID)
		if err != nil {
			return absent(err, store.RunNotFound(c.ns, a.RunID))
		}
		c.approval = a
		return c.allowQueue(run.Queue)
	}
	return fmt.Errorf("%w: route without an authorization rule", ErrPermissionDenied)
}

// absent is err of the read the server made to authorize a call, or notFound
// (the store's own wording of the absence, store.RunNotFound or
// store.ApprovalNotFound) when err is that absence. The read is not what the
// caller asked for: as it was, a cancellation of an unknown run answered
// `getting run: run not found: …`, and the Go client's `deciding approval "x":
// getting approval "x": approval not found: …` named two operations. The detail
// is now `run not found: "x" in namespace "ns"`, to which a client adds its own
// operation.
func absent(err, notFound error) error {
	if errors.Is(err, errors.Unwrap(notFound)) { // its sentinel: store.ErrRunNotFound, ...
		return notFound
	}
	return err
}

// allowGlobal checks a route that addresses no namespace (the tokens): p needs
// role (or admin) granted on every namespace, "*", for every queue.
func allowGlobal(p *auth.Principal, role auth.Role) error {
	if slices.ContainsFunc(p.Grants, func(g auth.Grant) bool {
		return g.Namespace == auth.AllNamespaces && g.Queue == "" && (g.Role == role || g.Role == auth.RoleAdmin)
	}) {
		return nil
	}
	return fmt.Errorf("%w: principal %q has no %s grant on every namespace (%s)", ErrPermissionDenied, p.Name, role, auth.AllNamespaces)
}

// hasRoleIn reports whether p holds role (or admin) on ns for some queue: a
// principal without one learns nothing about the namespace, not even whether a
// run exists.
func hasRoleIn(p *auth.Principal, role auth.Role, ns string) bool {
	if ns == auth.SystemNamespace {
		return false
	}
	return slices.ContainsFunc(p.Grants, func(g auth.Grant) bool {
		return (g.Namespace == auth.AllNamespaces || g.Namespace == ns) && (g.Role == role || g.Role == auth.RoleAdmin)
	})
}

// authenticate finds the principal of an Authorization header or, when there
// is none, of the verified client certificate of the request (mutual TLS; ctx
// is the request's, see transport). A bearer token, when sent, wins.
func (s *Server) authenticate(ctx context.Context, header string) (*auth.Principal, error) {
	if s.cfg.Insecure {
		notePrincipal(ctx, insecurePrincipal.Name)
		return insecurePrincipal, nil
	}
	if subject, ok := certSubject(ctx); ok && header == "" {
		return s.authenticateCert(ctx, subject)
	}
	scheme, token, ok := strings.Cut(header, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || strings.TrimSpace(token) == "" {
		return nil, fmt.Errorf("%w: send Authorization: Bearer <token>", auth.ErrUnauthenticated)
	}
	p, err := s.cfg.Authenticator.Authenticate(ctx, strings.TrimSpace(token))
	switch {
	case errors.Is(err, auth.ErrUnauthenticated):
		return nil, fmt.Errorf("%w: unknown, revoked or expired token", auth.ErrUnauthenticated)
	case errors.Is(err, ErrRateLimited): // unknownLookups
		return nil, err
	case err != nil:
		return nil, fmt.Errorf("%w: authenticating: %v", ErrUnavailable, err)
	case p == nil:
		return nil, fmt.Errorf("%w: unknown token", auth.ErrUnauthenticated)
	}
	notePrincipal(ctx, p.Name)
	return p, nil
}

// checkApprover refuses a decision by a principal the approval does not name,
// when it names any.
func checkApprover(c *call) error {
	a := c.approval
	if len(a.Approvers) == 0 || slices.Contains(a.Approvers, c.principal.Name) {
		return nil
	}
	return fmt.Errorf("%w: approval %s names approvers %v; principal %q is not one", ErrPermissionDenied, a.ID, a.Approvers, c.principal.Name)
}
