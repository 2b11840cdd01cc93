package secrets_test

import (
	"bytes"
	"context"
	"path/filepath"
	"sync"
	"testing"

	"github.com/trellis-dev/trellis/internal/secrets"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

func keys(t testing.TB) (*secrets.Keys, store.Store) {
	st, err := storesqlite.Open(context.Background(), storesqlite.Config{Path: filepath.Join(t.TempDir(), "k.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	k, err := secrets.Load(context.Background(), st)
	if err != nil {
		t.Fatal(err)
	}
	return k, st
}

// A lease's secret is valid for that lease only: any other namespace, run,
// queue or token, a changed or malformed secret, or another store's key
// refuses it; the servers of one store agree.
func TestLeaseSecrets(t *testing.T) {
	t.Parallel()
	k, st := keys(t)
	l := store.Lease{Namespace: "ns", RunID: "r1", Queue: "q", Token: 42}
	l.Secret = k.Leases().Sign(l)
	if len(l.Secret) != secrets.SecretLen || !k.Leases().Valid(l) {
		t.Fatalf("secret %q: want a valid secret of %d characters", l.Secret, secrets.SecretLen)
	}
	again, err := secrets.Load(context.Background(), st) // another server of the store
	if err != nil || !again.Leases().Valid(l) {
		t.Fatalf("another server of the store refuses the secret: %v", err)
	}
	if !bytes.Equal(again.Derive("x"), k.Derive("x")) || bytes.Equal(k.Derive("x"), k.Derive("y")) {
		t.Fatal("derived keys: want the same per label on every server, distinct per label")
	}
	other, _ := keys(t)
	for name, bad := range map[string]store.Lease{
		"another namespace": {Namespace: "ns2", RunID: "r1", Queue: "q", Token: 42},
		"another run":       {Namespace: "ns", RunID: "r2", Queue: "q", Token: 42},
		"another queue":     {Namespace: "ns", RunID: "r1", Queue: "q2", Token: 42},
		"another token":     {Namespace: "ns", RunID: "r1", Queue: "q", Token: 43},
		// length-prefixed fields: moving a byte from one field to the next changes the message
		"shifted fields": {Namespace: "ns", RunID: "r", Queue: "1q", Token: 42},
	} {
		bad.Secret = l.Secret
		if k.Leases().Valid(bad) {
			t.Errorf("%s: the secret is valid", name)
		}
	}
	for name, secret := range map[string]string{"empty": "", "short": l.Secret[:20], "malformed": "%" + l.Secret[1:],
		"one character changed": string(l.Secret[0]^1) + l.Secret[1:]} {
		bad := l
		bad.Secret = secret
		if k.Leases().Valid(bad) {
			t.Errorf("%s secret: valid", name)
		}
	}
	if other.Leases().Valid(l) {
		t.Error("another store's servers accept the secret")
	}
}

// Signing and checking are safe for concurrent use.
func TestLeaseSecretsConcurrent(t *testing.T) {
	t.Parallel()
	k, _ := keys(t)
	s := k.Leases()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			for j := range 200 {
				l := store.Lease{Namespace: "ns", RunID: "r", Queue: "q", Token: int64(i*1000 + j)}
				l.Secret = s.Sign(l)
				if !s.Valid(l) {
					t.Errorf("lease %d: its own secret is refused", l.Token)
				}
			}
		})
	}
	wg.Wait()
}

func BenchmarkLeaseSecretValid(b *testing.B) {
	k, _ := keys(b)
	s := k.Leases()
	l := store.Lease{Namespace: "default", RunID: "0192f0c4-7f7a-7a1e-9c3b-6a1d2e3f4a5b", Queue: "default", Token: 1795926819559420}
	l.Secret = s.Sign(l)
	b.ReportAllocs()
	for b.Loop() {
		if !s.Valid(l) {
			b.Fatal("refused")
		}
	}
}
