package storeauth_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/internal/auth/storeauth"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// countingStore is a real store that counts the token lookups made of it.
type countingStore struct {
	store.Store
	lookups, touches atomic.Int64
}

func (c *countingStore) TokenByHash(ctx context.Context, p *store.TokenByHashParams) (*store.Token, error) {
	c.lookups.Add(1)
	return c.Store.TokenByHash(ctx, p)
}

func (c *countingStore) TokenBySubject(ctx context.Context, p *store.TokenBySubjectParams) (*store.Token, error) {
	c.lookups.Add(1)
	return c.Store.TokenBySubject(ctx, p)
}

func (c *countingStore) TokenTouch(ctx context.Context, p *store.TokenTouchParams) error {
	c.touches.Add(1)
	return c.Store.TokenTouch(ctx, p)
}

// setup opens a SQLite store and an Authenticator sharing the fake clock clk.
func setup(t *testing.T, cfg storeauth.Config) (*countingStore, *storeauth.Authenticator, *clock) {
	t.Helper()
	clk := &clock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	s, err := storesqlite.Open(t.Context(), storesqlite.Config{Path: filepath.Join(t.TempDir(), "t.db"), Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	cs := &countingStore{Store: s}
	cfg.Now = clk.now
	return cs, storeauth.New(cs, cfg), clk
}

// create makes a token and returns its secret.
func create(t *testing.T, s store.Store, p store.TokenCreateParams) string {
	t.Helper()
	secret, hash, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	p.Hash = hash
	if p.Grants == nil {
		p.Grants = []auth.Grant{{Role: auth.RoleReader, Namespace: "shop"}}
	}
	if _, err := s.TokenCreate(t.Context(), &p); err != nil {
		t.Fatal(err)
	}
	return secret
}

func wantRefused(t *testing.T, what string, err error) {
	t.Helper()
	if !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("%s: %v, want ErrUnauthenticated", what, err)
	}
}

// A flood of malformed tokens costs no store read; the same unknown secret sent
// again and again costs one read per UnknownTTL; distinct unknown secrets are
// remembered in bounded memory.
func TestUnknownTokensCostNoReadEach(t *testing.T) {
	t.Parallel()
	s, a, clk := setup(t, storeauth.Config{})
	ctx := t.Context()
	for _, garbage := range []string{"", "x", "Bearer trl_x", "trl_" + string(make([]byte, 43)), "trl_!!!!"} {
		for range 200 {
			_, err := a.Authenticate(ctx, garbage)
			wantRefused(t, "garbage", err)
		}
	}
	if n := s.lookups.Load(); n != 0 {
		t.Fatalf("1,000 malformed tokens cost %d store reads, want 0", n)
	}
	unknown, _, _ := auth.NewToken()
	for range 1000 {
		_, err := a.Authenticate(ctx, unknown)
		wantRefused(t, "unknown", err)
	}
	if n := s.lookups.Load(); n != 1 {
		t.Fatalf("one unknown secret sent 1,000 times cost %d store reads, want 1", n)
	}
	clk.advance(storeauth.DefaultUnknownTTL)
	_, err := a.Authenticate(ctx, unknown)
	wantRefused(t, "unknown after the TTL", err)
	if n := s.lookups.Load(); n != 2 {
		t.Fatalf("after UnknownTTL: %d store reads, want 2", n)
	}
	const max = 50
	a.SetMaxCached(max)
	for range max + 20 {
		tok, _, _ := auth.NewToken()
		_, err := a.Authenticate(ctx, tok)
		wantRefused(t, "distinct unknown", err)
	}
	if _, n := a.CacheSizes(); n > max {
		t.Errorf("%d unknown secrets remembered, want at most %d", n, max)
	}
}

// Forget makes this process refuse a revoked token at once; the cache never
// serves a token past its secret's expiry.
func TestForgetAndExpiry(t *testing.T) {
	t.Parallel()
	s, a, clk := setup(t, storeauth.Config{CacheTTL: time.Hour})
	ctx := t.Context()
	ci := create(t, s, store.TokenCreateParams{Name: "ci"})
	other := create(t, s, store.TokenCreateParams{Name: "other"})
	short := create(t, s, store.TokenCreateParams{Name: "short", TTL: 2 * time.Second})
	for _, tok := range []string{ci, other, short} {
		if _, err := a.Authenticate(ctx, tok); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.TokenRevoke(ctx, &store.TokenRevokeParams{Name: "ci"}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, ci); err != nil {
		t.Fatalf("a revoked token within the cache's hour: %v, want the cached principal", err)
	}
	a.Forget("ci")
	_, err := a.Authenticate(ctx, ci)
	wantRefused(t, "a revoked token after Forget", err)
	if _, err := a.Authenticate(ctx, other); err != nil {
		t.Errorf("another token after Forget(ci): %v", err)
	}
	clk.advance(2 * time.Second)
	before := s.lookups.Load()
	_, err = a.Authenticate(ctx, short)
	wantRefused(t, "a token past its expiry, cached for an hour", err)
	if s.lookups.Load() != before+1 {
		t.Error("the expired token was not looked up again")
	}
}

// The secret a rotation replaced is cached no longer than its grace.
func TestRotatedSecretCachedWithinGrace(t *testing.T) {
	t.Parallel()
	s, a, clk := setup(t, storeauth.Config{CacheTTL: time.Hour})
	ctx := t.Context()
	old := create(t, s, store.TokenCreateParams{Name: "ci"})
	secret, hash, _ := auth.NewToken()
	if _, err := s.TokenRotate(ctx, &store.TokenRotateParams{Name: "ci", Hash: hash, Grace: time.Minute}); err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{old, secret} {
		if p, err := a.Authenticate(ctx, tok); err != nil || p.Name != "ci" {
			t.Fatalf("in the grace: %+v, %v", p, err)
		}
	}
	clk.advance(time.Minute)
	_, err := a.Authenticate(ctx, old)
	wantRefused(t, "the old secret after the grace", err)
	if _, err := a.Authenticate(ctx, secret); err != nil {
		t.Errorf("the new secret after the grace: %v", err)
	}
}

// A token's use is recorded at most once a TouchInterval per Authenticator.
func TestTouchAtMostOncePerInterval(t *testing.T) {
	t.Parallel()
	s, a, clk := setup(t, storeauth.Config{CacheTTL: -1})
	ctx := t.Context()
	ci := create(t, s, store.TokenCreateParams{Name: "ci"})
	first := clk.now()
	for range 100 {
		if _, err := a.Authenticate(ctx, ci); err != nil {
			t.Fatal(err)
		}
		clk.advance(100 * time.Millisecond)
	}
	if n := s.touches.Load(); n != 1 {
		t.Fatalf("100 requests in 10 s: %d touches, want 1", n)
	}
	lastUsed := func() *time.Time {
		ts, err := s.TokenList(ctx)
		if err != nil || len(ts) != 1 {
			t.Fatal(ts, err)
		}
		return ts[0].LastUsedAt
	}
	if got := lastUsed(); got == nil || !got.Equal(first) {
		t.Fatalf("LastUsedAt = %v, want %v", got, first)
	}
	clk.advance(storeauth.DefaultTouchInterval)
	now := clk.now()
	if _, err := a.Authenticate(ctx, ci); err != nil {
		t.Fatal(err)
	}
	if got := lastUsed(); s.touches.Load() != 2 || got == nil || !got.Equal(now) {
		t.Errorf("a minute later: %d touches, LastUsedAt %v; want 2, %v", s.touches.Load(), got, now)
	}
}

// A certificate subject authenticates as its token; an unknown one is refused
// and remembered; a revoked token disables its subject.
func TestAuthenticateSubject(t *testing.T) {
	t.Parallel()
	s, a, _ := setup(t, storeauth.Config{})
	ctx := t.Context()
	grants := []auth.Grant{{Role: auth.RoleWorker, Namespace: "shop"}}
	create(t, s, store.TokenCreateParams{Name: "w1", Subject: "CN=w1,O=team", Grants: grants})
	p, err := a.AuthenticateSubject(ctx, "CN=w1,O=team")
	if err != nil || p.Name != "w1" || !p.Allows(auth.RoleWorker, "shop", "q") {
		t.Fatalf("AuthenticateSubject = %+v, %v; want w1, worker on shop", p, err)
	}
	for range 10 {
		_, err := a.AuthenticateSubject(ctx, "CN=stranger")
		wantRefused(t, "an unknown subject", err)
	}
	_, err = a.AuthenticateSubject(ctx, "")
	wantRefused(t, "no subject", err)
	if n := s.lookups.Load(); n != 2 {
		t.Errorf("store reads = %d, want 2 (w1 once, the stranger once)", n)
	}
	if _, err := s.TokenRevoke(ctx, &store.TokenRevokeParams{Name: "w1"}); err != nil {
		t.Fatal(err)
	}
	a.Forget("w1")
	_, err = a.AuthenticateSubject(ctx, "CN=w1,O=team")
	wantRefused(t, "the subject of a revoked token", err)
}

// gate is a LookupGate that counts what it admits and refuses once told to.
type gate struct {
	admitted, found, missed atomic.Int64
	refuse                  atomic.Bool
}

var errGated = errors.New("gated")

func (g *gate) Admit(context.Context) (func(bool), error) {
	if g.refuse.Load() {
		return nil, errGated
	}
	g.admitted.Add(1)
	return func(found bool) {
		if found {
			g.found.Add(1)
		} else {
			g.missed.Add(1)
		}
	}, nil
}

// The gate admits the reads of credentials never found live: an unknown
// secret's (once: then it is remembered), a token's first; a token found live
// is read again after its cache entry ends without asking the gate, and a
// refusing gate refuses only the others, without a read.
func TestLookupGate(t *testing.T) {
	t.Parallel()
	g := &gate{}
	cs, a, clk := setup(t, storeauth.Config{Gate: g})
	secret := create(t, cs, store.TokenCreateParams{Name: "ci"})
	if _, err := a.Authenticate(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	unknown, _, _ := auth.NewToken()
	for range 3 {
		wantRefused(t, "unknown", func() error { _, err := a.Authenticate(t.Context(), unknown); return err }())
	}
	if g.admitted.Load() != 2 || g.found.Load() != 1 || g.missed.Load() != 1 {
		t.Fatalf("gate admitted %d (found %d, missed %d), want the token's first read and the unknown one's",
			g.admitted.Load(), g.found.Load(), g.missed.Load())
	}
	g.refuse.Store(true)
	clk.advance(storeauth.DefaultUnknownTTL + time.Second) // every cache entry ends
	reads := cs.lookups.Load()
	if _, err := a.Authenticate(t.Context(), secret); err != nil {
		t.Fatalf("a token found live, refused by a closed gate: %v", err)
	}
	other, _, _ := auth.NewToken()
	if _, err := a.Authenticate(t.Context(), other); !errors.Is(err, errGated) {
		t.Fatalf("a new secret through a closed gate: %v, want its refusal", err)
	}
	if got := cs.lookups.Load() - reads; got != 1 {
		t.Fatalf("%d store reads, want 1 (the live token's)", got)
	}
}

// blockingStore holds a token lookup until released.
type blockingStore struct {
	store.Store
	reading, release chan struct{}
}

func (b *blockingStore) TokenByHash(ctx context.Context, p *store.TokenByHashParams) (*store.Token, error) {
	t, err := b.Store.TokenByHash(ctx, p)
	b.reading <- struct{}{}
	<-b.release
	return t, err
}

// A lookup that read a token before it was revoked and forgotten here does not
// put it back in the cache: the revoking server refuses it at once.
func TestForgetDuringLookup(t *testing.T) {
	t.Parallel()
	cs, _, clk := setup(t, storeauth.Config{})
	secret := create(t, cs, store.TokenCreateParams{Name: "ci"})
	bs := &blockingStore{Store: cs.Store, reading: make(chan struct{}), release: make(chan struct{})}
	a := storeauth.New(bs, storeauth.Config{Now: clk.now, TouchInterval: -1})
	done := make(chan error, 1)
	go func() { _, err := a.Authenticate(context.Background(), secret); done <- err }()
	<-bs.reading // read: live
	if _, err := cs.TokenRevoke(t.Context(), &store.TokenRevokeParams{Name: "ci"}); err != nil {
		t.Fatal(err)
	}
	a.Forget("ci")
	close(bs.release)
	if err := <-done; err != nil {
		t.Fatalf("the lookup that began before the revocation: %v", err)
	}
	go func() { <-bs.reading }() // the next lookup reads the store again
	if _, err := a.Authenticate(t.Context(), secret); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("after the revocation and Forget: %v, want refused (not answered from the cache)", err)
	}
}
