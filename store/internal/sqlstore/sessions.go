package sqlstore

import (
	"context"
	"errors"

	"github.com/trellis-dev/trellis/store"
)

// sessionQueries are the statements of the ended UI sessions
// (store.SessionStore).
type sessionQueries struct {
	end, ended, purge string
}

func newSessionQueries(r func(string) string) sessionQueries {
	return sessionQueries{
		end:   r(`INSERT INTO ui_sessions_ended (id, expires_at) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`),
		ended: r(`SELECT 1 FROM ui_sessions_ended WHERE id = $1`),
		purge: r(`DELETE FROM ui_sessions_ended WHERE id IN
	(SELECT id FROM ui_sessions_ended WHERE expires_at <= $1 LIMIT $2)`),
	}
}

// SessionEnd records an ended session; p must be valid.
func (s *SQL) SessionEnd(tx Tx, p *store.SessionEndParams) error {
	_, err := tx.Exec(s.sess.end, p.ID, s.d.Time(p.ExpiresAt))
	return err
}

// SessionEnded reports whether session id was ended.
func (s *SQL) SessionEnded(q Querier, id []byte) (bool, error) {
	var one int
	err := q.QueryRow(s.sess.ended, id).Scan(&one)
	if errors.Is(err, ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// SessionsPurge deletes up to limit (0: 1000) records expired at tx.Now().
func (s *SQL) SessionsPurge(tx Tx, limit int) (int, error) {
	if limit <= 0 || limit > store.MaxPurgeBatch {
		limit = min(max(limit, 1000), store.MaxPurgeBatch) // bounded, as every purge's batch
	}
	n, err := tx.Exec(s.sess.purge, s.d.Time(tx.Now()), limit)
	return int(n), err
}

// SessionEnded implements store.SessionStore.
func (r Reads) SessionEnded(ctx context.Context, p *store.SessionEndedParams) (bool, error) {
	if err := p.Validate(); err != nil {
		return false, err
	}
	var ended bool
	err := r.read(ctx, "reading ended session", func(q Querier) (err error) {
		ended, err = r.sql.SessionEnded(q, p.ID)
		return err
	})
	return ended, err
}
