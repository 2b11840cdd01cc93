package sqlstore

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// tokenCols are the columns scanToken reads, in order.
const tokenCols = `name, grants, created_at, revoked_at, expires_at, last_used_at, rotated_at,
	prev_expires_at, subject`

// tokenQueries are the statements of the token store (store.TokenStore).
type tokenQueries struct {
	insert, subjectTaken, byHash, bySubject, list, revoke string
	rotateRead, rotate, touch                             string
}

func newTokenQueries(d *Dialect) tokenQueries {
	r := d.rebind
	// live: the token is not revoked and its current secret has not expired at $2.
	const live = `revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $2)`
	return tokenQueries{
		// insert leaves a taken name, hash or subject alone: no failed statement
		// in the driver's batch, and 0 rows tell the caller.
		insert: r(`INSERT INTO tokens (name, hash, grants, created_at, expires_at, ttl, subject)
	VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING`),
		subjectTaken: r(`SELECT name FROM tokens WHERE subject = $1 AND revoked_at IS NULL`),
		// byHash finds the current secret or the previous one in its grace; each
		// arm reads its own index (tokens' hash, tokens_prev_hash).
		byHash: r(`SELECT ` + tokenCols + `, hash FROM tokens WHERE hash = $1 AND ` + live + `
	UNION ALL
	SELECT ` + tokenCols + `, hash FROM tokens WHERE prev_hash = $1 AND revoked_at IS NULL AND prev_expires_at > $2`),
		bySubject: r(`SELECT ` + tokenCols + ` FROM tokens WHERE subject = $1 AND ` + live),
		list:      r(`SELECT ` + tokenCols + ` FROM tokens ORDER BY name`),
		revoke: r(`UPDATE tokens SET revoked_at = COALESCE(revoked_at, $2) WHERE name = $1
	RETURNING ` + tokenCols),
		rotateRead: r(`SELECT ` + tokenCols + `, hash, ttl, prev_hash FROM tokens WHERE name = $1` + d.Lock()),
		rotate: r(`UPDATE tokens SET hash = $2, expires_at = $3, rotated_at = $4, prev_hash = $5,
	prev_expires_at = $6 WHERE name = $1 RETURNING ` + tokenCols),
		touch: r(`UPDATE tokens SET last_used_at = $2
	WHERE ` + d.InList("name", "$1") + ` AND (last_used_at IS NULL OR last_used_at < $2)`),
	}
}

// TokenCreate stores a token; p must be valid (TokenCreateParams.Validate).
func (s *SQL) TokenCreate(tx Tx, p *store.TokenCreateParams) (*store.Token, error) {
	grants, err := json.Marshal(p.Grants)
	if err != nil {
		return nil, fmt.Errorf("encoding grants: %w", err)
	}
	if p.Subject != "" {
		var holder string
		err := tx.QueryRow(s.tok.subjectTaken, p.Subject).Scan(&holder)
		switch {
		case err == nil:
			// Expired tokens keep theirs until revoked (a subject names one
			// token for good, as a name does): revoke it to reuse the subject.
			return nil, fmt.Errorf("%w: subject %q belongs to token %q (revoke it to reuse the subject)", store.ErrTokenExists, p.Subject, holder)
		case !errors.Is(err, ErrNoRows):
			return nil, err
		}
	}
	now := tx.Now().UTC()
	t := &store.Token{Name: p.Name, Grants: append([]auth.Grant{}, p.Grants...), CreatedAt: now, Subject: p.Subject}
	var expires time.Time
	var ttl any // NULL: never expires
	if p.TTL > 0 {
		expires, ttl = now.Add(p.TTL), int64(p.TTL)
		t.ExpiresAt = &expires
	}
	n, err := tx.Exec(s.tok.insert, p.Name, p.Hash, string(grants), s.d.Time(now), s.d.Time(expires), ttl, nullString(p.Subject))
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: %q (or its subject)", store.ErrTokenExists, p.Name)
	}
	return t, nil
}

// nullString is s, or NULL when empty.
func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// TokenRevoke revokes a token by name (keeping the time of an earlier revocation).
func (s *SQL) TokenRevoke(tx Tx, name string) (*store.Token, error) {
	t, err := scanToken(tx.QueryRow(s.tok.revoke, name, s.d.Time(tx.Now())))
	if errors.Is(err, ErrNoRows) {
		return nil, fmt.Errorf("%w: %q", store.ErrTokenNotFound, name)
	}
	return t, err
}

// TokenRotate gives a live token a new secret; p must be valid
// (TokenRotateParams.Validate). See store.TokenStore.TokenRotate for the grace.
func (s *SQL) TokenRotate(tx Tx, p *store.TokenRotateParams) (*store.Token, error) {
	var (
		hash, prevHash []byte
		ttl            sql.NullInt64
	)
	t, err := scanToken(tx.QueryRow(s.tok.rotateRead, p.Name), &hash, &ttl, &prevHash)
	switch {
	case errors.Is(err, ErrNoRows):
		return nil, fmt.Errorf("%w: %q", store.ErrTokenNotFound, p.Name)
	case err != nil:
		return nil, err
	}
	now := tx.Now().UTC()
	switch {
	case t.RevokedAt != nil:
		return nil, fmt.Errorf("%w: token %q was revoked", store.ErrTokenInactive, p.Name)
	case !t.Active(now):
		return nil, fmt.Errorf("%w: token %q expired at %s", store.ErrTokenInactive, p.Name, t.ExpiresAt.Format(time.RFC3339))
	}
	var expires, prevUntil time.Time
	if ttl.Valid {
		expires = now.Add(time.Duration(ttl.Int64))
	}
	switch {
	case p.Grace == 0:
		prevHash = nil // every earlier secret stops now
	case prevHash != nil && t.PreviousExpiresAt != nil && now.Before(*t.PreviousExpiresAt):
		// The older secret keeps its grace, cut to this one's when that ends
		// sooner; the current one ends.
		prevUntil = *t.PreviousExpiresAt
		if end := now.Add(p.Grace); end.Before(prevUntil) {
			prevUntil = end
		}
	default:
		prevHash, prevUntil = hash, now.Add(p.Grace)
		if t.ExpiresAt != nil && t.ExpiresAt.Before(prevUntil) {
			prevUntil = *t.ExpiresAt
		}
	}
	return scanToken(tx.QueryRow(s.tok.rotate, p.Name, p.Hash, s.d.Time(expires), s.d.Time(now), prevHash, s.d.Time(prevUntil)))
}

// TokenTouch sets the last use of the named tokens to now, never back.
func (s *SQL) TokenTouch(tx Tx, names []string) error {
	list, err := s.d.List(names)
	if err != nil {
		return err
	}
	_, err = tx.Exec(s.tok.touch, list, s.d.Time(tx.Now()))
	return err
}

// TokenByHash reads the live token with hash, as its current secret or its
// previous one within the grace, at now.
func (s *SQL) TokenByHash(q Querier, hash []byte, now time.Time) (*store.Token, error) {
	var current []byte
	t, err := scanToken(q.QueryRow(s.tok.byHash, hash, s.d.Time(now)), &current)
	if errors.Is(err, ErrNoRows) {
		return nil, store.ErrTokenNotFound
	}
	if err != nil {
		return nil, err
	}
	t.SecretExpiresAt = t.ExpiresAt
	if !bytes.Equal(current, hash) {
		t.SecretExpiresAt = t.PreviousExpiresAt
	}
	return t, nil
}

// TokenBySubject reads the live, unexpired token of a certificate subject at now.
func (s *SQL) TokenBySubject(q Querier, subject string, now time.Time) (*store.Token, error) {
	t, err := scanToken(q.QueryRow(s.tok.bySubject, subject, s.d.Time(now)))
	if errors.Is(err, ErrNoRows) {
		return nil, store.ErrTokenNotFound
	}
	return t, err
}

// TokenList reads every token by name.
func (s *SQL) TokenList(q Querier) ([]*store.Token, error) {
	ts := []*store.Token{}
	err := q.Query(s.tok.list, nil, func(row Scanner) error {
		t, err := scanToken(row)
		if err == nil {
			ts = append(ts, t)
		}
		return err
	})
	return ts, err
}

// scanToken reads tokenCols, then extra columns into extra.
func scanToken(sc Scanner, extra ...any) (*store.Token, error) {
	var (
		t                                        store.Token
		grants                                   string
		subject                                  sql.NullString
		created, revoked, expires, used, rotated Time
		prevExpires                              Time
	)
	dest := append([]any{&t.Name, &grants, &created, &revoked, &expires, &used, &rotated,
		&prevExpires, &subject}, extra...)
	if err := sc.Scan(dest...); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(grants), &t.Grants); err != nil {
		return nil, fmt.Errorf("decoding grants of token %q: %w", t.Name, err)
	}
	t.CreatedAt, t.RevokedAt, t.ExpiresAt, t.LastUsedAt = created.T, revoked.Ptr(), expires.Ptr(), used.Ptr()
	t.RotatedAt, t.PreviousExpiresAt = rotated.Ptr(), prevExpires.Ptr()
	t.Subject = subject.String
	return &t, nil
}

// TokenByHash implements store.TokenStore; now is the driver's clock.
func (r Reads) TokenByHash(ctx context.Context, p *store.TokenByHashParams, now time.Time) (*store.Token, error) {
	var t *store.Token
	err := r.read(ctx, "finding token", func(q Querier) (err error) {
		t, err = r.sql.TokenByHash(q, p.Hash, now)
		return err
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// TokenBySubject implements store.TokenStore; now is the driver's clock.
func (r Reads) TokenBySubject(ctx context.Context, p *store.TokenBySubjectParams, now time.Time) (*store.Token, error) {
	var t *store.Token
	err := r.read(ctx, "finding token by subject", func(q Querier) (err error) {
		t, err = r.sql.TokenBySubject(q, p.Subject, now)
		return err
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// TokenList implements store.TokenStore.
func (r Reads) TokenList(ctx context.Context) ([]*store.Token, error) {
	var ts []*store.Token
	err := r.read(ctx, "listing tokens", func(q Querier) (err error) {
		ts, err = r.sql.TokenList(q)
		return err
	})
	if err != nil {
		return nil, err
	}
	return ts, nil
}
