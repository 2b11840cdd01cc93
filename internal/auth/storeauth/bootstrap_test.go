package storeauth_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// lostAnswer is a store whose token creation commits and then fails, as a
// commit whose answer was lost does.
type lostAnswer struct{ store.Store }

func (l lostAnswer) TokenCreate(ctx context.Context, p *store.TokenCreateParams) (*store.Token, error) {
	if _, err := l.Store.TokenCreate(ctx, p); err != nil {
		return nil, err
	}
	return nil, errors.New("connection reset: the commit's answer was lost")
}

// A create whose answer was lost but which committed keeps the file: the admin
// token is never left without its secret. The file is 0600 whatever the umask.
func TestBootstrapFileLostAnswer(t *testing.T) {
	t.Parallel()
	s := openStore(t)
	path := filepath.Join(t.TempDir(), "admin-token")
	created, err := storeauth.BootstrapFile(t.Context(), lostAnswer{s}, path)
	if err != nil || !created {
		t.Fatalf("BootstrapFile = %v, %v; want created (the token was committed)", created, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the token file was removed: %v", err)
	}
	if p, err := storeauth.New(s, storeauth.Config{}).Authenticate(t.Context(), strings.TrimSpace(string(b))); err != nil || p.Name != storeauth.BootstrapName {
		t.Fatalf("the file's secret: %+v, %v", p, err)
	}
}

// The file is 0600 whatever the process's umask.
func TestBootstrapFileModeDespiteUmask(t *testing.T) {
	old := syscall.Umask(0o277)
	defer syscall.Umask(old)
	s := openStore(t)
	path := filepath.Join(t.TempDir(), "admin-token")
	if _, err := storeauth.BootstrapFile(t.Context(), s, path); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the token file: %v, %v; want mode 0600", fi, err)
	}
}
