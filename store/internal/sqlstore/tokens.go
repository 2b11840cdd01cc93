package sqlstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// tokenCols are the columns scanToken reads, in order.
const tokenCols = `name, grants, created_at, revoked_at`

// tokenQueries are the statements of the token store (store.TokenStore).
type tokenQueries struct {
	insert, byHash, list, revoke string
}

func newTokenQueries(r func(string) string) tokenQueries {
	return tokenQueries{
		// insert leaves a taken name or hash alone: no failed statement in the
		// driver's batch, and 0 rows tell the caller.
		insert: r(`INSERT INTO tokens (name, hash, grants, created_at) VALUES ($1, $2, $3, $4)
	ON CONFLICT DO NOTHING`),
		byHash: r(`SELECT ` + tokenCols + ` FROM tokens WHERE hash = $1 AND revoked_at IS NULL`),
		list:   r(`SELECT ` + tokenCols + ` FROM tokens ORDER BY name`),
		revoke: r(`UPDATE tokens SET revoked_at = COALESCE(revoked_at, $2) WHERE name = $1
	RETURNING ` + tokenCols),
	}
}

// TokenCreate stores a token; p must be valid (TokenCreateParams.Validate).
func (s *SQL) TokenCreate(tx Tx, p *store.TokenCreateParams) (*store.Token, error) {
	grants, err := json.Marshal(p.Grants)
	if err != nil {
		return nil, fmt.Errorf("encoding grants: %w", err)
	}
	n, err := tx.Exec(s.tok.insert, p.Name, p.Hash, string(grants), s.d.Time(tx.Now()))
	if err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: %q", store.ErrTokenExists, p.Name)
	}
	return &store.Token{Name: p.Name, Grants: append([]auth.Grant{}, p.Grants...), CreatedAt: tx.Now().UTC()}, nil
}

// TokenRevoke revokes a token by name (keeping the time of an earlier revocation).
func (s *SQL) TokenRevoke(tx Tx, name string) (*store.Token, error) {
	t, err := scanToken(tx.QueryRow(s.tok.revoke, name, s.d.Time(tx.Now())))
	if errors.Is(err, ErrNoRows) {
		return nil, fmt.Errorf("%w: %q", store.ErrTokenNotFound, name)
	}
	return t, err
}

// TokenByHash reads the live token with hash.
func (s *SQL) TokenByHash(q Querier, hash []byte) (*store.Token, error) {
	t, err := scanToken(q.QueryRow(s.tok.byHash, hash))
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

func scanToken(sc Scanner) (*store.Token, error) {
	var (
		t                store.Token
		grants           string
		created, revoked Time
	)
	if err := sc.Scan(&t.Name, &grants, &created, &revoked); err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(grants), &t.Grants); err != nil {
		return nil, fmt.Errorf("decoding grants of token %q: %w", t.Name, err)
	}
	t.CreatedAt, t.RevokedAt = created.T, revoked.Ptr()
	return &t, nil
}

// TokenByHash implements store.TokenStore.
func (r Reads) TokenByHash(ctx context.Context, p *store.TokenByHashParams) (*store.Token, error) {
	var t *store.Token
	err := r.read(ctx, "finding token", func(q Querier) (err error) {
		t, err = r.sql.TokenByHash(q, p.Hash)
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
