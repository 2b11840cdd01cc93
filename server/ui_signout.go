package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// Signing out of the web UI ends the session for real: the server records the
// session's ID as ended in the store (store.SessionStore) until the cookie's
// own expiry, and every server of the store refuses the cookie from then on,
// a copy included. A server remembers the answers for a short while
// (sessionCheckTTL), so a page's polls and an open stream's checks cost no
// store read each; a session signed out on another server is refused here
// within that time (at once on the server it was signed out on).

// sessionCheckTTL is how long a server trusts a "not ended" answer of the
// store.
const sessionCheckTTL = 500 * time.Millisecond

// maxSessionChecks bounds the answers remembered; when full they are
// forgotten.
const maxSessionChecks = 10_000

// uiSessionKey is the context key under which uiStream passes its session to
// the API's stream route, whose registration then checks the session too.
type uiSessionKey struct{}

// sessionChecks remembers the store's answers about sessions: ended ones
// until their expiry, live ones for sessionCheckTTL.
type sessionChecks struct {
	mu sync.Mutex
	m  map[string]sessionCheck // by session ID
}

type sessionCheck struct {
	ended bool
	until time.Time
}

func (sc *sessionChecks) get(id []byte, now time.Time) (ended, known bool) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	c, ok := sc.m[string(id)]
	if !ok || !now.Before(c.until) {
		return false, false
	}
	return c.ended, true
}

func (sc *sessionChecks) put(id []byte, c sessionCheck) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.m == nil || len(sc.m) >= maxSessionChecks {
		sc.m = map[string]sessionCheck{}
	}
	sc.m[string(id)] = c
}

// checkSession refuses a session that was signed out (auth.ErrUnauthenticated).
func (s *Server) checkSession(ctx context.Context, sess *session) error {
	now := s.cfg.Clock.Now()
	ended, known := s.sessions.get(sess.ID, now)
	if !known {
		var err error
		ended, err = s.store.SessionEnded(ctx, &store.SessionEndedParams{ID: sess.ID})
		if err != nil {
			return fmt.Errorf("%w: checking the session: %v", ErrUnavailable, err)
		}
		until := now.Add(sessionCheckTTL)
		if ended {
			until = sess.Expires
		}
		s.sessions.put(sess.ID, sessionCheck{ended: ended, until: until})
	}
	if ended {
		return fmt.Errorf("%w: the session was signed out", auth.ErrUnauthenticated)
	}
	return nil
}

// endSession records session sess of principal p as signed out, and ends the
// UI's streams that it opened on this server at once (those on other servers
// end at their next check).
func (s *Server) endSession(ctx context.Context, sess *session, p *auth.Principal) error {
	if err := s.store.SessionEnd(ctx, &store.SessionEndParams{ID: sess.ID, ExpiresAt: sess.Expires}); err != nil {
		return fmt.Errorf("%w: signing out: %v", ErrUnavailable, err)
	}
	s.sessions.put(sess.ID, sessionCheck{ended: true, until: sess.Expires})
	if p != nil { // its streams; a session whose token no longer authenticates has none left
		s.endCredentialKey(credentialKey(p.Name, "Bearer "+sess.Token, string(sess.ID)))
	}
	return nil
}

// purgeEndedSessions deletes the records of ended sessions past their expiry,
// in batches, and returns how many it deleted.
func (s *Server) purgeEndedSessions(ctx context.Context) (int, error) {
	total := 0
	for {
		n, err := s.store.SessionsPurge(ctx, &store.SessionsPurgeParams{Limit: idempotencyPurgeBatch})
		total += n
		if err != nil || n < idempotencyPurgeBatch {
			return total, err
		}
	}
}
