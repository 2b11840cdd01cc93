package storepg

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// SecretKey implements store.KeyStore (written once, in sqlstore keys.go).
func (s *Store) SecretKey(ctx context.Context, p *store.SecretKeyParams) ([]byte, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("reading secret key: %w", err)
	}
	var key []byte
	err := s.inTx(ctx, func(tx *wtx) (err error) {
		key, err = shared.SecretKey(stx{tx}, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("reading secret key: %w", err)
	}
	return key, nil
}
