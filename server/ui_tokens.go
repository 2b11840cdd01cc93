package server

import (
	"net/http"
	"time"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// The web UI's tokens page: every token of the store (never a secret), for an
// admin of every namespace, who manages them (the rule of GET /ui/tokens). It
// lists only: tokens are created, rotated and revoked with `trellis tokens` or
// the API, whose answers carry the secrets a page should not.

// tokenRow is a token as the page shows it.
type tokenRow struct {
	*store.Token
	State, StateClass string
	Grants            string
	LastUsed          time.Time
	InGrace           bool // the secret before the last rotation still works
}

type tokensData struct {
	Rows []tokenRow
	Live int
}

func (s *Server) uiTokens(w http.ResponseWriter, r *http.Request, c *uiCall) error {
	ts, err := s.store.TokenList(r.Context())
	if err != nil {
		return err
	}
	now := s.cfg.Clock.Now()
	d := tokensData{Rows: make([]tokenRow, 0, len(ts))}
	for _, t := range ts {
		row := tokenRow{Token: t, State: "live", StateClass: "st-succeeded", Grants: auth.GrantsText(t.Grants)}
		switch {
		case t.RevokedAt != nil:
			row.State, row.StateClass = "revoked", "st-failed"
		case !t.Active(now):
			row.State, row.StateClass = "expired", "st-expired"
		default:
			d.Live++
			row.InGrace = t.PreviousExpiresAt != nil && now.Before(*t.PreviousExpiresAt)
		}
		if t.LastUsedAt != nil {
			row.LastUsed = *t.LastUsedAt
		}
		d.Rows = append(d.Rows, row)
	}
	s.render(w, r, c, 200, "tokens", d)
	return nil
}
