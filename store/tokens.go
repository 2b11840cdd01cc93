package store

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

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
	// is taken, by a live or a revoked token, or the subject by a live token.
	TokenCreate(ctx context.Context, p *TokenCreateParams) (*Token, error)
	// TokenByHash returns the live token whose secret hashes to p.Hash, for
	// authentication: its current secret until ExpiresAt, or the secret it had
	// before its last rotation until PreviousExpiresAt (the grace), by the
	// store's clock; Token.SecretExpiresAt says which. ErrTokenNotFound when no
	// token has it, or the token is revoked, or that secret has expired.
	TokenByHash(ctx context.Context, p *TokenByHashParams) (*Token, error)
	// TokenBySubject returns the live, unexpired token whose Subject is
	// p.Subject (a client certificate's, mutual TLS). ErrTokenNotFound when none.
	TokenBySubject(ctx context.Context, p *TokenBySubjectParams) (*Token, error)
	// TokenList lists every token, live and revoked, by name.
	TokenList(ctx context.Context) ([]*Token, error)
	// TokenRevoke revokes a token by name, at once and for ever, and returns it.
	// Revoking a revoked token changes nothing. ErrTokenNotFound for an unknown name.
	TokenRevoke(ctx context.Context, p *TokenRevokeParams) (*Token, error)
	// TokenRotate gives a live token a new secret (p.Hash) and returns it. The
	// secret it replaces keeps working for p.Grace (0: not at all), never past
	// its own expiry; a rotation during the grace of an earlier one ends the
	// secret that earlier rotation made at once and leaves the older secret its
	// grace (so a retried rotation whose answer was lost does not cut off the
	// secret still in use). A token created with a TTL gets it again from now.
	// ErrTokenNotFound for an unknown name, ErrTokenInactive for a revoked or
	// expired token.
	TokenRotate(ctx context.Context, p *TokenRotateParams) (*Token, error)
	// TokenTouch records that the named tokens were used now (LastUsedAt, by the
	// store's clock, never moved back). Unknown names are ignored. Callers batch
	// and space their touches (storeauth touches a token at most once a minute).
	TokenTouch(ctx context.Context, p *TokenTouchParams) error
}

// Token is a stored token: its name and grants, never its secret or hash.
type Token struct {
	Name      string       `json:"name"`
	Grants    []auth.Grant `json:"grants"`
	CreatedAt time.Time    `json:"created_at"`
	// ExpiresAt is when its current secret stops working; nil: never.
	ExpiresAt *time.Time `json:"expires_at"`
	// LastUsedAt is when it last authenticated a request, within a minute or
	// so (servers record it at most once a minute each); nil: never.
	LastUsedAt *time.Time `json:"last_used_at"`
	// RevokedAt is set once the token is revoked.
	RevokedAt *time.Time `json:"revoked_at,omitempty"`
	// RotatedAt is the time of its last rotation, if any.
	RotatedAt *time.Time `json:"rotated_at,omitempty"`
	// PreviousExpiresAt is when the secret it had before its last rotation
	// stops (or stopped) working: the end of the rotation's grace.
	PreviousExpiresAt *time.Time `json:"previous_expires_at,omitempty"`
	// Subject, when set, is the Subject of the client certificates that act as
	// this token under mutual TLS, in RFC 2253 form (x509 Name.String()).
	Subject string `json:"subject,omitempty"`

	// SecretExpiresAt, set by TokenByHash only, is when the secret it was
	// found by stops working: ExpiresAt for the current secret, PreviousExpiresAt
	// for the one before the last rotation; nil: never.
	SecretExpiresAt *time.Time `json:"-"`
}

// Active reports whether t authenticates at now: not revoked, not expired.
func (t *Token) Active(now time.Time) bool {
	return t.RevokedAt == nil && (t.ExpiresAt == nil || now.Before(*t.ExpiresAt))
}

// Principal is the principal requests made with the token act as.
func (t *Token) Principal() *auth.Principal {
	return &auth.Principal{Name: t.Name, Grants: append([]auth.Grant{}, t.Grants...)}
}

// TokenHashSize is the size of a token's hash (SHA-256).
const TokenHashSize = 32

// Bounds of a token's TTL and of a rotation's grace.
const (
	// MinTokenTTL is the shortest TTL a token may be created with: a shorter
	// one is a mistake of units more likely than a wish.
	MinTokenTTL = time.Second
	// MaxTokenDuration bounds a TTL and a grace (about 100 years).
	MaxTokenDuration = 100 * 365 * 24 * time.Hour
	// MaxSubjectLen caps a token's certificate subject.
	MaxSubjectLen = 1024
	// DefaultTokenGrace is how long a rotated token's old secret keeps working
	// when the rotation names no grace (`trellis tokens rotate`, the API).
	DefaultTokenGrace = time.Hour
)

// TokenCreateParams are the parameters of TokenCreate.
type TokenCreateParams struct {
	Name   string       `json:"name"`
	Grants []auth.Grant `json:"grants"`
	// Hash is the SHA-256 hash of the token's secret (auth.HashToken).
	Hash []byte `json:"hash"`
	// TTL, when above 0, is how long the token works from its creation (and
	// from each rotation); 0: until revoked. At least MinTokenTTL.
	TTL time.Duration `json:"ttl,omitempty"`
	// Subject, when set, maps the client certificates with this Subject (RFC
	// 2253, x509 Name.String()) to the token under mutual TLS.
	Subject string `json:"subject,omitempty"`
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
	if p.TTL != 0 && (p.TTL < MinTokenTTL || p.TTL > MaxTokenDuration) {
		return fmt.Errorf("%w: TTL %s: want 0 (never expires) or %s to %s", ErrInvalidParams, p.TTL, MinTokenTTL, MaxTokenDuration)
	}
	if p.Subject != "" {
		return ValidateSubject(p.Subject)
	}
	return nil
}

// ValidateSubject checks a certificate subject as tokens hold it: RFC 2253
// text, ATTR=VALUE pairs, at most MaxSubjectLen bytes of printable UTF-8.
func ValidateSubject(subject string) error {
	switch {
	case subject == "":
		return fmt.Errorf("%w: Subject is empty", ErrInvalidParams)
	case len(subject) > MaxSubjectLen:
		return fmt.Errorf("%w: Subject is longer than %d bytes", ErrInvalidParams, MaxSubjectLen)
	case !utf8.ValidString(subject) || !strings.Contains(subject, "="):
		return fmt.Errorf("%w: Subject %q: want a certificate subject in RFC 2253 form, such as CN=w1,O=team", ErrInvalidParams, subject)
	}
	for _, r := range subject {
		if !unicode.IsPrint(r) {
			return fmt.Errorf("%w: Subject %q: no control characters", ErrInvalidParams, subject)
		}
	}
	return nil
}

// TokenByHashParams are the parameters of TokenByHash.
type TokenByHashParams struct {
	Hash []byte `json:"hash"`
}

// TokenBySubjectParams are the parameters of TokenBySubject.
type TokenBySubjectParams struct {
	Subject string `json:"subject"`
}

// TokenRevokeParams are the parameters of TokenRevoke.
type TokenRevokeParams struct {
	Name string `json:"name"`
}

// TokenRotateParams are the parameters of TokenRotate.
type TokenRotateParams struct {
	Name string `json:"name"`
	// Hash is the SHA-256 hash of the new secret (auth.HashToken).
	Hash []byte `json:"hash"`
	// Grace is how long the replaced secret keeps working; 0: it stops at once.
	Grace time.Duration `json:"grace"`
}

// Validate reports the first missing or malformed field of p, wrapping
// ErrInvalidParams.
func (p *TokenRotateParams) Validate() error {
	if err := ValidateTokenName(p.Name); err != nil {
		return err
	}
	if len(p.Hash) != TokenHashSize {
		return fmt.Errorf("%w: Hash must be %d bytes, not %d", ErrInvalidParams, TokenHashSize, len(p.Hash))
	}
	if p.Grace < 0 || p.Grace > MaxTokenDuration {
		return fmt.Errorf("%w: Grace %s: want 0 to %s", ErrInvalidParams, p.Grace, MaxTokenDuration)
	}
	return nil
}

// TokenTouchParams are the parameters of TokenTouch.
type TokenTouchParams struct {
	// Names are the tokens used (at most MaxTokenTouch).
	Names []string `json:"names"`
}

// MaxTokenTouch caps the names of one TokenTouch.
const MaxTokenTouch = 1000

// Validate reports too many names, wrapping ErrInvalidParams.
func (p *TokenTouchParams) Validate() error {
	if n := len(p.Names); n > MaxTokenTouch {
		return fmt.Errorf("%w: %d names, at most %d", ErrInvalidParams, n, MaxTokenTouch)
	}
	return nil
}
