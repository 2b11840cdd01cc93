// Package secrets holds the keys that every server of one store shares, and
// what a server signs with them: the secrets of the leases it hands to remote
// workers (DESIGN: The worker boundary; docs/security.md).
//
// One root key is kept in the store (store.KeyStore, name "server"), made by
// the first server that starts on it; every other key is derived from it by
// label (Derive), so that servers agree on all of them without more rows.
package secrets

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"hash"
	"io"
	"sync"

	"github.com/trellis-dev/trellis/store"
)

// RootName is the name of the root key in the store.
const RootName = "server"

// Keys derives the keys of the servers of one store from its root key.
type Keys struct {
	root []byte
}

// Load returns the keys of the store ks, keeping a fresh random root key in it
// when it has none yet.
func Load(ctx context.Context, ks store.KeyStore) (*Keys, error) {
	fresh := make([]byte, store.MinSecretKeySize)
	if _, err := rand.Read(fresh); err != nil {
		return nil, fmt.Errorf("loading server keys: %w", err)
	}
	root, err := ks.SecretKey(ctx, &store.SecretKeyParams{Name: RootName, New: fresh})
	if err != nil {
		return nil, fmt.Errorf("loading server keys: %w", err)
	}
	return &Keys{root: root}, nil
}

// Derive returns the 32-byte key of label: HMAC-SHA256 of the label under the
// root key. Distinct labels give independent keys.
func (k *Keys) Derive(label string) []byte {
	m := hmac.New(sha256.New, k.root)
	m.Write([]byte("trellis key: " + label))
	return m.Sum(nil)
}

// Leases returns the signer of lease secrets.
func (k *Keys) Leases() *Leases {
	key := k.Derive("lease secret")
	return &Leases{macs: sync.Pool{New: func() any { return hmac.New(sha256.New, key) }}}
}

// Leases makes and checks lease secrets. A lease's secret is the HMAC-SHA256,
// under a key derived from the store's root key, of everything that identifies
// the lease and what it may touch: namespace, run ID, queue and fencing token.
// So it is as unguessable as 256 random bits to anyone without the key, it
// changes with every claim (each has a new token), a worker cannot move it to
// another run or queue, and any server of the store checks it in constant time
// without reading the store. The store never sees it, so no read of the store
// (API, list, history, stream, UI) can reveal it.
type Leases struct {
	macs sync.Pool // of hash.Hash, HMAC-SHA256 under the lease key: one a call, without allocating it
}

// SecretLen is the length of a lease secret as text.
var SecretLen = base64.RawURLEncoding.EncodedLen(sha256.Size)

// Sign returns the secret of lease l (its Secret field is not read).
func (s *Leases) Sign(l store.Lease) string {
	return base64.RawURLEncoding.EncodeToString(s.mac(l))
}

// Valid reports whether l.Secret is the secret of l, in constant time.
func (s *Leases) Valid(l store.Lease) bool {
	var got [sha256.Size]byte
	if len(l.Secret) != SecretLen {
		return false
	}
	if n, err := base64.RawURLEncoding.Decode(got[:], []byte(l.Secret)); err != nil || n != len(got) {
		return false
	}
	return hmac.Equal(got[:], s.mac(l))
}

// SignClaimed sets the lease secret of each claimed run.
func (s *Leases) SignClaimed(runs ...*store.ClaimedRun) {
	for _, cr := range runs {
		cr.LeaseSecret = s.Sign(cr.Lease())
	}
}

func (s *Leases) mac(l store.Lease) []byte {
	m := s.macs.Get().(hash.Hash)
	defer s.macs.Put(m)
	m.Reset()
	var buf [binary.MaxVarintLen64]byte
	for _, f := range []string{l.Namespace, l.RunID, l.Queue} {
		m.Write(buf[:binary.PutUvarint(buf[:], uint64(len(f)))]) // length-prefixed: no two leases share a message
		io.WriteString(m, f)
	}
	binary.BigEndian.PutUint64(buf[:8], uint64(l.Token))
	m.Write(buf[:8])
	return m.Sum(make([]byte, 0, sha256.Size))
}
