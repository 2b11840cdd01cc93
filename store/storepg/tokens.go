package storepg

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// The token store is written once, in sqlstore (tokens.go); these are its entry
// points.

// TokenCreate implements store.TokenStore.
func (s *Store) TokenCreate(ctx context.Context, p *store.TokenCreateParams) (*store.Token, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("creating token: %w", err)
	}
	var t *store.Token
	err := s.inTx(ctx, func(tx *wtx) (err error) {
		t, err = shared.TokenCreate(stx{tx}, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("creating token: %w", err)
	}
	return t, nil
}

// TokenByHash implements store.TokenStore.
func (s *Store) TokenByHash(ctx context.Context, p *store.TokenByHashParams) (*store.Token, error) {
	return shared.Reads(readSource{s}).TokenByHash(ctx, p)
}

// TokenList implements store.TokenStore.
func (s *Store) TokenList(ctx context.Context) ([]*store.Token, error) {
	return shared.Reads(readSource{s}).TokenList(ctx)
}

// TokenRevoke implements store.TokenStore.
func (s *Store) TokenRevoke(ctx context.Context, p *store.TokenRevokeParams) (*store.Token, error) {
	var t *store.Token
	err := s.inTx(ctx, func(tx *wtx) (err error) {
		t, err = shared.TokenRevoke(stx{tx}, p.Name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("revoking token: %w", err)
	}
	return t, nil
}
