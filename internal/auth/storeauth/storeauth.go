// Package storeauth authenticates bearer tokens against a store's tokens
// (store.TokenStore): the auth.Authenticator the server uses, and the bootstrap of
// the first admin token.
package storeauth

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
)

// DefaultCacheTTL is how long an Authenticator trusts a token it found: a revoked
// token stops working within this time on every server.
const DefaultCacheTTL = 2 * time.Second

// maxCached bounds the cache; when full it is emptied.
const maxCached = 10_000

// Config tunes an Authenticator. The zero value is the default.
type Config struct {
	// CacheTTL is how long a found token is used without asking the store again;
	// 0 means DefaultCacheTTL, negative disables the cache. It is also the longest
	// a revoked token keeps working.
	CacheTTL time.Duration
	// Now is the clock of the cache; nil means time.Now.
	Now func() time.Time
}

// Authenticator implements auth.Authenticator over a token store: it hashes the
// presented secret (auth.HashToken) and looks the hash up. Found tokens are cached
// in the process for CacheTTL, so that a busy client costs one lookup per TTL;
// unknown tokens are not cached. Safe for concurrent use.
type Authenticator struct {
	ts  store.TokenStore
	ttl time.Duration
	now func() time.Time

	mu    sync.Mutex
	cache map[string]cached // by hash
}

type cached struct {
	p       *auth.Principal
	expires time.Time
}

var _ auth.Authenticator = (*Authenticator)(nil)

// New returns an Authenticator over ts.
func New(ts store.TokenStore, cfg Config) *Authenticator {
	a := &Authenticator{ts: ts, ttl: cfg.CacheTTL, now: cfg.Now, cache: map[string]cached{}}
	if a.ttl == 0 {
		a.ttl = DefaultCacheTTL
	}
	if a.now == nil {
		a.now = time.Now
	}
	return a
}

// Authenticate implements auth.Authenticator. An empty, malformed, unknown or
// revoked token fails with auth.ErrUnauthenticated; a store that cannot answer
// fails with its own error (the server answers 503, not 401).
func (a *Authenticator) Authenticate(ctx context.Context, token string) (*auth.Principal, error) {
	if !auth.LooksLikeToken(token) {
		return nil, fmt.Errorf("authenticating: %w: no token, or not a Trellis token", auth.ErrUnauthenticated)
	}
	hash := auth.HashToken(token)
	if p := a.lookup(string(hash)); p != nil {
		return p, nil
	}
	t, err := a.ts.TokenByHash(ctx, &store.TokenByHashParams{Hash: hash})
	switch {
	case errors.Is(err, store.ErrTokenNotFound):
		return nil, fmt.Errorf("authenticating: %w: unknown or revoked token", auth.ErrUnauthenticated)
	case err != nil:
		return nil, fmt.Errorf("authenticating: %w", err)
	}
	p := t.Principal()
	a.remember(string(hash), p)
	return clonePrincipal(p), nil
}

// lookup returns a copy of the cached principal of hash, nil when absent or stale.
func (a *Authenticator) lookup(hash string) *auth.Principal {
	if a.ttl < 0 {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	c, ok := a.cache[hash]
	if !ok {
		return nil
	}
	if !a.now().Before(c.expires) {
		delete(a.cache, hash)
		return nil
	}
	return clonePrincipal(c.p)
}

func (a *Authenticator) remember(hash string, p *auth.Principal) {
	if a.ttl < 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.cache) >= maxCached {
		clear(a.cache)
	}
	a.cache[hash] = cached{p: p, expires: a.now().Add(a.ttl)}
}

// clonePrincipal copies p so that a caller cannot change the cached one.
func clonePrincipal(p *auth.Principal) *auth.Principal {
	return &auth.Principal{Name: p.Name, Grants: append([]auth.Grant{}, p.Grants...)}
}

// BootstrapName is the name of the token Bootstrap creates.
const BootstrapName = "admin"

// Bootstrap prepares the tokens of a server's first start: when the store has no
// token at all (live or revoked), it creates one named "admin" with the admin role
// on every namespace and returns its secret, which the caller prints once and
// never again. Otherwise, or when another server created it first, it returns "".
func Bootstrap(ctx context.Context, ts store.TokenStore) (string, error) {
	existing, err := ts.TokenList(ctx)
	if err != nil {
		return "", fmt.Errorf("bootstrapping tokens: %w", err)
	}
	if len(existing) > 0 {
		return "", nil
	}
	secret, hash, err := auth.NewToken()
	if err != nil {
		return "", fmt.Errorf("bootstrapping tokens: %w", err)
	}
	_, err = ts.TokenCreate(ctx, &store.TokenCreateParams{Name: BootstrapName, Hash: hash,
		Grants: []auth.Grant{{Role: auth.RoleAdmin, Namespace: auth.AllNamespaces}}})
	switch {
	case errors.Is(err, store.ErrTokenExists):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("bootstrapping tokens: %w", err)
	}
	return secret, nil
}
