package storeauth_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/internal/auth/storeauth"
	"github.com/trellis-dev/trellis/store"
)

// BootstrapFile writes the first admin secret to a new 0600 file, then creates
// the token; later starts leave the file alone.
func TestBootstrapFile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openStore(t)
	path := filepath.Join(t.TempDir(), "admin-token")
	created, err := storeauth.BootstrapFile(ctx, s, path)
	if err != nil || !created {
		t.Fatalf("BootstrapFile = %v, %v; want created", created, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the token file: %v, %v; want mode 0600", fi, err)
	}
	b, _ := os.ReadFile(path)
	secret := strings.TrimSpace(string(b))
	p, err := storeauth.New(s, storeauth.Config{}).Authenticate(ctx, secret)
	if err != nil || p.Name != storeauth.BootstrapName || !p.Allows(auth.RoleAdmin, "any", "") {
		t.Fatalf("the file's secret authenticates as %+v, %v; want admin on *", p, err)
	}
	os.Chmod(path, 0o400) // an operator's change, which a later start must leave alone
	if created, err := storeauth.BootstrapFile(ctx, s, path); err != nil || created {
		t.Errorf("second BootstrapFile = %v, %v; want nothing (a token exists)", created, err)
	}
	if b2, _ := os.ReadFile(path); string(b2) != string(b) {
		t.Errorf("the second start changed the file")
	}
	other := filepath.Join(t.TempDir(), "other")
	if created, err := storeauth.BootstrapFile(ctx, s, other); err != nil || created {
		t.Errorf("BootstrapFile to another file on a store with tokens = %v, %v; want nothing", created, err)
	}
	if _, err := os.Stat(other); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a store with tokens made a file: %v", err)
	}
}

// A file already there is never overwritten nor trusted: the start fails and
// no token is created, so no admin token exists whose secret nobody has.
func TestBootstrapFileExists(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openStore(t)
	path := filepath.Join(t.TempDir(), "admin-token")
	planted, _, _ := auth.NewToken()
	if err := os.WriteFile(path, []byte(planted+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	created, err := storeauth.BootstrapFile(ctx, s, path)
	if created || !errors.Is(err, storeauth.ErrTokenFileExists) || !strings.Contains(err.Error(), path) {
		t.Fatalf("BootstrapFile over an existing file = %v, %v; want ErrTokenFileExists naming it", created, err)
	}
	if b, _ := os.ReadFile(path); string(b) != planted+"\n" {
		t.Error("the existing file was changed")
	}
	if ts, err := s.TokenList(ctx); err != nil || len(ts) != 0 {
		t.Errorf("tokens after a refused bootstrap: %v, %v; want none", ts, err)
	}
	if _, err := storeauth.New(s, storeauth.Config{}).Authenticate(ctx, planted); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Errorf("the planted secret: %v, want ErrUnauthenticated", err)
	}
	// In a directory it cannot write, it fails and creates nothing.
	if created, err := storeauth.BootstrapFile(ctx, s, filepath.Join(t.TempDir(), "no", "such", "dir")); err == nil || created {
		t.Errorf("BootstrapFile into a missing directory = %v, %v; want an error", created, err)
	}
	if ts, _ := s.TokenList(ctx); len(ts) != 0 {
		t.Errorf("a failed bootstrap created %d tokens", len(ts))
	}
	var _ store.TokenStore = s
}
