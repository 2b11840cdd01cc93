package store

import (
	"context"
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/internal/auth"
)

// TokenStore keeps the server's bearer tokens (see DESIGN: Authorization and
// docs/security.md). A token is global to the store — not of a namespace — and its
// grants name the namespaces it acts on. The store never sees a token's secret, only
// its hash (auth.HashToken): a leaked database grants nothing.
//
// Token names are unique in the store for ever: a revoked token keeps its name, so
// that the principal recorded by a decision always names one token.
type TokenStore interface {
	// TokenCreate stores a new token. ErrTokenExists when the name (or the hash)
	// is taken, by a live or a revoked token.
	TokenCreate(ctx context.Context, p *TokenCreateParams) (*Token, error)
	// TokenByHash returns the live token whose secret hashes to p.Hash, for
	// authentication. ErrTokenNotFound when no token has it or the token is revoked.
	TokenByHash(ctx context.Context, p *TokenByHashParams) (*Token, error)
	// TokenList lists every token, live and revoked, by name.
	TokenList(ctx context.Context) ([]*Token, error)
	// TokenRevoke revokes a token by name, at once and for ever, and returns it.
	// Revoking a revoked token changes nothing. ErrTokenNotFound for an unknown name.
	TokenRevoke(ctx context.Context, p *TokenRevokeParams) (*Token, error)
}

// Token is a stored token: its name and grants, never its secret or hash.
type Token struct {
	Name      string       `json:"name"`
	Grants    []auth.Grant `json:"grants"`
	CreatedAt time.Time    `json:"created_at"`
	// RevokedAt is set once the token is revoked.
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
}

// Principal is the principal requests made with the token act as.
func (t *Token) Principal() *auth.Principal {
	return &auth.Principal{Name: t.Name, Grants: append([]auth.Grant{}, t.Grants...)}
}

// TokenHashSize is the size of a token's hash (SHA-256).
const TokenHashSize = 32

// TokenCreateParams are the parameters of TokenCreate.
type TokenCreateParams struct {
	Name   string       `json:"name"`
	Grants []auth.Grant `json:"grants"`
	// Hash is the SHA-256 hash of the token's secret (auth.HashToken).
	Hash []byte `json:"hash"`
}

// Validate reports the first missing or malformed field of p, wrapping
// ErrInvalidParams.
func (p *TokenCreateParams) Validate() error {
	if err := ValidateTokenName(p.Name); err != nil {
		return err
	}
	if len(p.Hash) != TokenHashSize {
		return fmt.Errorf("%w: Hash must be %d bytes, not %d", ErrInvalidParams, TokenHashSize, len(p.Hash))
	}
	if len(p.Grants) == 0 {
		return fmt.Errorf("%w: Grants: a token needs at least one grant", ErrInvalidParams)
	}
	for _, g := range p.Grants {
		if err := ValidateGrant(g); err != nil {
			return err
		}
	}
	return nil
}

// TokenByHashParams are the parameters of TokenByHash.
type TokenByHashParams struct {
	Hash []byte `json:"hash"`
}

// TokenRevokeParams are the parameters of TokenRevoke.
type TokenRevokeParams struct {
	Name string `json:"name"`
}
