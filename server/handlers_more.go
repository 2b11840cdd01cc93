package server

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// TokenRequest creates a token: a name unique in the store and at least one grant.
type TokenRequest struct {
	Name   string       `json:"name"`
	Grants []auth.Grant `json:"grants"`
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

// createToken makes a token the way `trellis tokens create --store` does: the
// server draws the secret, keeps its hash and answers the secret once.
// errInsecureTokens refuses to make a token on an --insecure server: anyone on
// the machine is its admin, and a token made there would keep its grants when
// the store is later served securely.
var errInsecureTokens = fmt.Errorf("%w: an --insecure server makes no tokens: whoever reaches it is an admin, and a "+
	"token made here would keep working once the store is served with authentication; create tokens on the store "+
	"(trellis tokens create --store URL) or through a server with authentication", ErrPermissionDenied)

func (s *Server) createToken(w http.ResponseWriter, r *http.Request, c *call) error {
	if s.cfg.Insecure {
		return errInsecureTokens
	}
	var req TokenRequest
	if err := decodeBody(w, r, s.cfg.MaxBodyBytes, false, &req); err != nil {
		return err
	}
	c.noteTarget(req.Name)
	c.noteDetail("grants %s", grantsText(req.Grants))
	secret, hash, err := auth.NewToken()
	if err != nil {
		return err
	}
	p := &store.TokenCreateParams{Name: req.Name, Grants: req.Grants, Hash: hash}
	if err := p.Validate(); err != nil {
		return err
	}
	t, err := s.store.TokenCreate(r.Context(), p)
	if err != nil {
		return err
	}
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
	// Its streams here end now; on other servers, at their next check
	// (streamreg.go).
	s.endStreamsOf(t.Name)
	writeJSON(w, 200, t)
	return nil
}
