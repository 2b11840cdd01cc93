package store

import (
	"context"
	"fmt"
)

// KeyStore keeps the secret keys that every server of one store shares: the key
// under which a server signs the lease secrets it hands to remote workers (so
// that a worker may send its next write through another server, or through the
// same one after a restart), and others derived from the same root. A key is
// made once, by the first server that asks for it, and never changes; whoever
// can read the store can read it (docs/security.md: the store's credentials are
// the operator's to protect).
type KeyStore interface {
	// SecretKey returns the key named p.Name. When the store has none, it keeps
	// p.New and returns it; when two callers race, both get the one kept first.
	SecretKey(ctx context.Context, p *SecretKeyParams) ([]byte, error)
}

// MinSecretKeySize is the least size of a key a KeyStore keeps (256 bits).
const MinSecretKeySize = 32

// SecretKeyParams are the parameters of SecretKey.
type SecretKeyParams struct {
	Name string `json:"name"`
	// New is the key to keep when the store has none of that name yet: at
	// least MinSecretKeySize random bytes.
	New []byte `json:"-"`
}

// Validate reports the first missing or malformed field of p, wrapping
// ErrInvalidParams.
func (p *SecretKeyParams) Validate() error {
	switch {
	case p.Name == "" || len(p.Name) > MaxNameLen:
		return fmt.Errorf("%w: Name must be 1 to %d bytes", ErrInvalidParams, MaxNameLen)
	case len(p.New) < MinSecretKeySize:
		return fmt.Errorf("%w: New is %d bytes, want at least %d", ErrInvalidParams, len(p.New), MinSecretKeySize)
	}
	return nil
}
