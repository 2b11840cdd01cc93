package server

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// TokenRequest creates a token: a name unique in the store and at least one grant.
type TokenRequest struct {
	Name   string       `json:"name"`
	Grants []auth.Grant `json:"grants"`
	// TTL, when set ("720h"), is how long the token works from now (and from
	// each rotation); omitted, it works until revoked.
	TTL store.Duration `json:"ttl,omitempty"`
	// Subject, when set, lets client certificates with this Subject (RFC 2253,
	// such as "CN=w1,O=team") act as the token under mutual TLS.
	Subject string `json:"subject,omitempty"`
}

// RotateTokenRequest rotates a token: a new secret, and the old one working for
// Grace ("1h", the default; "0s": it stops at once).
type RotateTokenRequest struct {
	Grace *store.Duration `json:"grace,omitempty"`
}

// maxChildPosition bounds the position query parameter of listChildren.
const maxChildPosition = 1 << 30

func (s *Server) listChildren(w http.ResponseWriter, r *http.Request, c *call) error {
	q := parseQuery(r, childParams)
	raw := q.str("position")
	if q.err != nil {
		return q.err
	}
	pos, err := strconv.Atoi(raw)
	if raw == "" || err != nil || pos < 0 || pos > maxChildPosition {
		return fmt.Errorf("%w: position: want the position of a child op, an integer from 0, got %q", ErrInvalidArgument, raw)
	}
	runs, err := c.client.Children(r.Context(), c.run.ID, pos)
	if err != nil {
		return err
	}
	writeJSON(w, 200, ChildList{Runs: runs})
	return nil
}

func (s *Server) getApproval(w http.ResponseWriter, r *http.Request, c *call) error {
	writeJSON(w, 200, c.approval)
	return nil
}

// errInsecureTokens refuses to make a token or a secret of one (create,
// rotate) on an --insecure server: anyone on the machine is its admin, and a
// secret made there would keep its grants when the store is later served
// securely.
var errInsecureTokens = fmt.Errorf("%w: an --insecure server makes no tokens: whoever reaches it is an admin, and a "+
	"token made here would keep working once the store is served with authentication; create tokens on the store "+
	"(trellis tokens create --store URL) or through a server with authentication", ErrPermissionDenied)

// createToken makes a token the way `trellis tokens create --store` does: the
// server draws the secret, keeps its hash and answers the secret once.
func (s *Server) createToken(w http.ResponseWriter, r *http.Request, c *call) error {
	if s.cfg.Insecure {
		return errInsecureTokens
	}
	var req TokenRequest
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, false, &req); err != nil {
		return err
	}
	c.noteTarget(req.Name)
	c.noteDetail("grants %s%s", auth.GrantsText(req.Grants), tokenOptionsText(req))
	secret, hash, err := auth.NewToken()
	if err != nil {
		return err
	}
	p := &store.TokenCreateParams{Name: req.Name, Grants: req.Grants, Hash: hash,
		TTL: time.Duration(req.TTL), Subject: req.Subject}
	if err := p.Validate(); err != nil {
		return err
	}
	t, err := s.store.TokenCreate(r.Context(), p)
	if err != nil {
		return err
	}
	s.forgetToken(t.Name) // a certificate of its subject may be remembered as unknown
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, 201, CreatedToken{Token: t, Secret: secret})
	return nil
}

func (s *Server) listTokens(w http.ResponseWriter, r *http.Request, c *call) error {
	ts, err := s.store.TokenList(r.Context())
	if err != nil {
		return err
	}
	if ts == nil {
		ts = []*store.Token{}
	}
	writeJSON(w, 200, TokenList{Tokens: ts})
	return nil
}

func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request, c *call) error {
	var empty struct{}
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, true, &empty); err != nil {
		return err
	}
	name := r.PathValue("name")
	// A token named before this rule (with '\' or '*'; a '/' cannot be in a
	// path) is revoked on the store: `trellis tokens revoke NAME --store URL`.
	if err := store.ValidateTokenName(name); err != nil {
		return err
	}
	t, err := s.store.TokenRevoke(r.Context(), &store.TokenRevokeParams{Name: name})
	if err != nil {
		return err
	}
	s.forgetToken(name) // refused here at once; elsewhere within the cache time
	// Its streams here end now; on other servers, at their next check
	// (streamreg.go).
	s.endStreamsOf(t.Name)
	writeJSON(w, 200, t)
	return nil
}

// rotateToken gives a token a new secret, answered once as createToken's is;
// the old secret keeps working for the grace.
func (s *Server) rotateToken(w http.ResponseWriter, r *http.Request, c *call) error {
	if s.cfg.Insecure {
		return errInsecureTokens
	}
	var req RotateTokenRequest
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, true, &req); err != nil {
		return err
	}
	grace := store.DefaultTokenGrace
	if req.Grace != nil {
		grace = time.Duration(*req.Grace)
	}
	c.noteDetail("grace %s", grace)
	secret, hash, err := auth.NewToken()
	if err != nil {
		return err
	}
	p := &store.TokenRotateParams{Name: r.PathValue("name"), Hash: hash, Grace: grace}
	if err := p.Validate(); err != nil {
		return err
	}
	t, err := s.store.TokenRotate(r.Context(), p)
	if err != nil {
		return err
	}
	s.forgetToken(t.Name) // the old secret's cache entry ends with its grace
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, 200, CreatedToken{Token: t, Secret: secret})
	return nil
}

// tokenOptionsText is the audit detail of a new token's TTL and subject, after
// its grants ("" when it has neither).
func tokenOptionsText(req TokenRequest) string {
	var b strings.Builder
	if req.TTL != 0 {
		fmt.Fprintf(&b, "; ttl %s", req.TTL)
	}
	if req.Subject != "" {
		fmt.Fprintf(&b, "; subject %s", req.Subject)
	}
	return b.String()
}

// forgetToken drops what the Authenticator cached of token name, when it
// caches (auth.Forgetter), so that a change made here takes effect here at once.
func (s *Server) forgetToken(name string) {
	if f, ok := s.cfg.Authenticator.(auth.Forgetter); ok {
		f.Forget(name)
	}
}
