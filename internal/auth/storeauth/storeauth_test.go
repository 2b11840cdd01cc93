package storeauth_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/internal/auth/storeauth"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

func openStore(t *testing.T) store.Store {
	t.Helper()
	s, err := storesqlite.Open(t.Context(), storesqlite.Config{Path: filepath.Join(t.TempDir(), "t.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// clock is a fake clock for the cache.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestBootstrapThenAuthenticate(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openStore(t)
	secret, err := storeauth.Bootstrap(ctx, s)
	if err != nil || secret == "" {
		t.Fatalf("Bootstrap = %q, %v; want a secret", secret, err)
	}
	if again, err := storeauth.Bootstrap(ctx, s); err != nil || again != "" {
		t.Errorf("second Bootstrap = %q, %v; want nothing (a token exists)", again, err)
	}
	a := storeauth.New(s, storeauth.Config{})
	p, err := a.Authenticate(ctx, secret)
	if err != nil {
		t.Fatalf("Authenticate(bootstrap secret): %v", err)
	}
	if p.Name != storeauth.BootstrapName || !p.Allows(auth.RoleAdmin, "any", "") || p.Allows(auth.RoleReader, auth.SystemNamespace, "") {
		t.Errorf("principal = %+v, want admin on * (not %s)", p, auth.SystemNamespace)
	}
}

func TestAuthenticateRejects(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openStore(t)
	a := storeauth.New(s, storeauth.Config{})
	unknown, _, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"", "Bearer x", "trl_short", unknown} {
		if _, err := a.Authenticate(ctx, tok); !errors.Is(err, auth.ErrUnauthenticated) {
			t.Errorf("Authenticate(%q) = %v, want ErrUnauthenticated", tok, err)
		}
	}
	s.Close()
	other, _, err := auth.NewToken() // unknown is remembered as such: no store read
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, other); err == nil || errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("Authenticate on a closed store = %v, want the store's error, not ErrUnauthenticated", err)
	}
}

// A revoked token works until its cache entry expires, then never again.
func TestRevocationWithinTTL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openStore(t)
	secret, hash, err := auth.NewToken()
	if err != nil {
		t.Fatal(err)
	}
	grants := []auth.Grant{{Role: auth.RoleReader, Namespace: "shop"}}
	if _, err := s.TokenCreate(ctx, &store.TokenCreateParams{Name: "ci", Grants: grants, Hash: hash}); err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Unix(1_000, 0)}
	a := storeauth.New(s, storeauth.Config{CacheTTL: 2 * time.Second, Now: clk.now})
	p, err := a.Authenticate(ctx, secret)
	if err != nil || p.Name != "ci" {
		t.Fatalf("Authenticate = %+v, %v", p, err)
	}
	p.Grants[0].Namespace = "*" // a caller's change must not reach the cache
	if _, err := s.TokenRevoke(ctx, &store.TokenRevokeParams{Name: "ci"}); err != nil {
		t.Fatal(err)
	}
	clk.advance(time.Second)
	p, err = a.Authenticate(ctx, secret)
	if err != nil || p.Allows(auth.RoleReader, "other", "") {
		t.Fatalf("Authenticate within the TTL = %+v, %v; want the cached principal, unchanged", p, err)
	}
	clk.advance(time.Second)
	if _, err := a.Authenticate(ctx, secret); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("Authenticate after the TTL = %v, want ErrUnauthenticated", err)
	}
	nocache := storeauth.New(s, storeauth.Config{CacheTTL: -1})
	if _, err := nocache.Authenticate(ctx, secret); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("Authenticate without cache = %v, want ErrUnauthenticated", err)
	}
}
