// Package storeauth authenticates bearer tokens and client certificates against a
// store's tokens (store.TokenStore): the auth.Authenticator the server uses, and
// the bootstrap of the first admin token.
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

// Defaults of Config.
const (
	// DefaultCacheTTL is how long an Authenticator trusts a token it found: a
	// revoked token stops working within this time on every server (and at
	// once on the server that revoked it, which forgets it).
	DefaultCacheTTL = 500 * time.Millisecond
	// DefaultUnknownTTL is how long an Authenticator remembers that a secret (or
	// a certificate subject) matched no token, so that the same unknown secret
	// sent again and again costs no store read each.
	DefaultUnknownTTL = time.Second
	// DefaultTouchInterval is how often, at most, an Authenticator records a
	// token's use in the store (store.TokenTouch, last_used_at).
	DefaultTouchInterval = time.Minute
)

// maxCached bounds each of the caches (found, unknown, touched); when one is
// full, an entry is dropped for each added.
const maxCached = 10_000

// Config tunes an Authenticator. The zero value is the default.
type Config struct {
	// CacheTTL is how long a found token is used without asking the store again;
	// 0 means DefaultCacheTTL, negative disables the caches (found and unknown).
	// It is also the longest a revoked token keeps working on another server.
	// A cached token never outlives its secret's expiry.
	CacheTTL time.Duration
	// UnknownTTL is how long a secret or subject that matched no token is
	// refused without asking the store again; 0 means DefaultUnknownTTL,
	// negative disables it.
	UnknownTTL time.Duration
	// TouchInterval is how often, at most, the use of one token is recorded
	// (last_used_at); 0 means DefaultTouchInterval, negative never records it.
	TouchInterval time.Duration
	// Now is the clock of the caches; nil means time.Now. It must be the
	// store's clock too (expiries are the store's times).
	Now func() time.Time
	// Gate, when set, admits the store reads of credentials that the caches
	// do not answer and that were not found live at their last read: a server
	// limits them per source address, so that a flood of distinct unknown
	// secrets (which no cache can remember ahead) costs no store read each
	// either, while tokens in use are read again freely.
	Gate LookupGate
}

// LookupGate admits the store reads of an Authenticator (Config.Gate).
type LookupGate interface {
	// Admit is called before a store read for a credential of the request of
	// ctx; an error refuses the credential without the read, and
	// Authenticate returns it. Otherwise done is called with the read's
	// outcome: whether it found a live token (or could not tell).
	Admit(ctx context.Context) (done func(found bool), err error)
}

func (c Config) withDefaults() Config {
	if c.CacheTTL == 0 {
		c.CacheTTL = DefaultCacheTTL
	}
	if c.UnknownTTL == 0 {
		c.UnknownTTL = DefaultUnknownTTL
	}
	if c.CacheTTL < 0 {
		c.UnknownTTL = -1
	}
	if c.TouchInterval == 0 {
		c.TouchInterval = DefaultTouchInterval
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Authenticator implements auth.Authenticator over a token store: it hashes the
// presented secret (auth.HashToken) and looks the hash up. Found tokens are
// cached in the process for CacheTTL (never past their secret's expiry), so that
// a busy client costs one lookup per TTL; secrets that match no token are
// remembered for UnknownTTL, so that a flood of the same unknown secret costs
// one lookup (malformed ones cost none: they are refused by their shape). It
// also authenticates client certificates by subject (auth.SubjectAuthenticator),
// forgets a token on demand (auth.Forgetter), and records each token's use in
// the store at most once per TouchInterval. Safe for concurrent use.
type Authenticator struct {
	ts  store.TokenStore
	cfg Config
	max int // maxCached (smaller in tests)

	mu sync.Mutex
	// gen counts the Forget calls: an answer read from the store before one
	// is not cached after it (it may be the token just revoked).
	gen     uint64
	found   map[string]cached    // by key (hashKey, subjectKey); kept past expiry as "was live"
	unknown map[string]time.Time // key → when to ask the store again
	touched map[string]time.Time // token name → when its use was last recorded
}

type cached struct {
	p       *auth.Principal
	expires time.Time
}

var (
	_ auth.Authenticator        = (*Authenticator)(nil)
	_ auth.SubjectAuthenticator = (*Authenticator)(nil)
	_ auth.Forgetter            = (*Authenticator)(nil)
)

// New returns an Authenticator over ts.
func New(ts store.TokenStore, cfg Config) *Authenticator {
	return &Authenticator{ts: ts, cfg: cfg.withDefaults(), max: maxCached,
		found: map[string]cached{}, unknown: map[string]time.Time{}, touched: map[string]time.Time{}}
}

func hashKey(hash []byte) string       { return "h:" + string(hash) }
func subjectKey(subject string) string { return "s:" + subject }

// Authenticate implements auth.Authenticator. An empty, malformed, unknown,
// revoked or expired token fails with auth.ErrUnauthenticated; a store that
// cannot answer fails with its own error (the server answers 503, not 401).
func (a *Authenticator) Authenticate(ctx context.Context, token string) (*auth.Principal, error) {
	if !auth.LooksLikeToken(token) {
		return nil, fmt.Errorf("authenticating: %w: no token, or not a Trellis token", auth.ErrUnauthenticated)
	}
	hash := auth.HashToken(token)
	return a.authenticate(ctx, hashKey(hash), "unknown, revoked or expired token", func() (*store.Token, *time.Time, error) {
		t, err := a.ts.TokenByHash(ctx, &store.TokenByHashParams{Hash: hash})
		if err != nil {
			return nil, nil, err
		}
		return t, t.SecretExpiresAt, nil
	})
}

// AuthenticateSubject implements auth.SubjectAuthenticator: the principal of
// the live, unexpired token whose Subject is subject.
func (a *Authenticator) AuthenticateSubject(ctx context.Context, subject string) (*auth.Principal, error) {
	if subject == "" {
		return nil, fmt.Errorf("authenticating: %w: a certificate without a subject", auth.ErrUnauthenticated)
	}
	what := fmt.Sprintf("no live token has certificate subject %q", subject)
	return a.authenticate(ctx, subjectKey(subject), what, func() (*store.Token, *time.Time, error) {
		t, err := a.ts.TokenBySubject(ctx, &store.TokenBySubjectParams{Subject: subject})
		if err != nil {
			return nil, nil, err
		}
		return t, t.ExpiresAt, nil
	})
}

// authenticate answers key from the caches, else by find (the token and when
// the credential stops working), caching the answer.
func (a *Authenticator) authenticate(ctx context.Context, key, unknownWhat string,
	find func() (*store.Token, *time.Time, error)) (*auth.Principal, error) {
	p, known, wasLive, gen := a.lookup(key)
	if p == nil {
		if known { // remembered as unknown
			return nil, fmt.Errorf("authenticating: %w: %s", auth.ErrUnauthenticated, unknownWhat)
		}
		done := func(bool) {}
		if g := a.cfg.Gate; g != nil && !wasLive {
			var err error
			if done, err = g.Admit(ctx); err != nil {
				return nil, fmt.Errorf("authenticating: %w", err)
			}
		}
		t, until, err := find()
		done(!errors.Is(err, store.ErrTokenNotFound))
		switch {
		case errors.Is(err, store.ErrTokenNotFound):
			a.rememberUnknown(key, gen)
			return nil, fmt.Errorf("authenticating: %w: %s", auth.ErrUnauthenticated, unknownWhat)
		case err != nil:
			return nil, fmt.Errorf("authenticating: %w", err)
		}
		p = t.Principal()
		a.remember(key, p, until, gen)
		p = clonePrincipal(p)
	}
	a.touch(ctx, p.Name)
	return p, nil
}

// lookup returns a copy of the cached principal of key (nil when absent or
// stale), whether key is remembered as unknown, whether it was found live at
// its last read (a stale entry: the gate lets its read through), and the
// Forget generation the caller's answer is cached under.
func (a *Authenticator) lookup(key string) (p *auth.Principal, unknown, wasLive bool, gen uint64) {
	now := a.cfg.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.found[key]; ok {
		if now.Before(c.expires) {
			return clonePrincipal(c.p), false, true, a.gen
		}
		return nil, false, true, a.gen // kept, until replaced or dropped
	}
	if until, ok := a.unknown[key]; ok {
		if now.Before(until) {
			return nil, true, false, a.gen
		}
		delete(a.unknown, key)
	}
	return nil, false, false, a.gen
}

// remember caches p under key for CacheTTL, or until the credential stops
// working (until) when that is sooner, unless a Forget came since the read
// began (generation gen): the token read may be the one forgotten.
func (a *Authenticator) remember(key string, p *auth.Principal, until *time.Time, gen uint64) {
	if a.cfg.CacheTTL < 0 {
		return
	}
	expires := a.cfg.Now().Add(a.cfg.CacheTTL)
	if until != nil && until.Before(expires) {
		expires = *until
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.gen != gen {
		return
	}
	makeRoom(a.found, a.max)
	a.found[key] = cached{p: p, expires: expires}
}

// rememberUnknown remembers for UnknownTTL that key matched no token (and
// forgets that it was live), unless a Forget came since the read began (a
// token made since may match it).
func (a *Authenticator) rememberUnknown(key string, gen uint64) {
	until := a.cfg.Now().Add(a.cfg.UnknownTTL)
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.found, key) // no longer "was live": its next read goes through the gate
	if a.cfg.UnknownTTL < 0 || a.gen != gen {
		return
	}
	makeRoom(a.unknown, a.max)
	a.unknown[key] = until
}

// makeRoom drops an arbitrary entry of a full cache: memory stays bounded
// however many distinct secrets are sent, at the cost of lookups again.
func makeRoom[V any](m map[string]V, max int) {
	if len(m) < max {
		return
	}
	for k := range m {
		delete(m, k)
		return
	}
}

// touch records the use of token name in the store when it was not recorded
// in the last TouchInterval by this Authenticator. It costs the request that
// finds it due one write, once a minute per token; a failure is not the
// request's (last_used_at is advisory) and is tried again at the next due time.
func (a *Authenticator) touch(ctx context.Context, name string) {
	if a.cfg.TouchInterval < 0 {
		return
	}
	now := a.cfg.Now()
	a.mu.Lock()
	last, ok := a.touched[name]
	due := !ok || now.Sub(last) >= a.cfg.TouchInterval
	if due {
		makeRoom(a.touched, a.max)
		a.touched[name] = now
	}
	a.mu.Unlock()
	if due {
		_ = a.ts.TokenTouch(ctx, &store.TokenTouchParams{Names: []string{name}})
	}
}

// Forget implements auth.Forgetter: the next request with a credential of the
// token named name asks the store again, as does every credential remembered as
// unknown (a token made or changed here may now match it).
func (a *Authenticator) Forget(name string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.gen++
	for k, c := range a.found {
		if c.p.Name == name {
			delete(a.found, k)
		}
	}
	clear(a.unknown)
}

// clonePrincipal copies p so that a caller cannot change the cached one.
func clonePrincipal(p *auth.Principal) *auth.Principal {
	c := *p
	c.Grants = append([]auth.Grant{}, p.Grants...)
	return &c
}
