package storesqlite

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
	err := s.write(ctx, func(tx *wtx) (err error) {
		t, err = shared.TokenCreate(tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("creating token: %w", err)
	}
	return t, nil
}

// TokenByHash implements store.TokenStore.
func (s *Store) TokenByHash(ctx context.Context, p *store.TokenByHashParams) (*store.Token, error) {
	return shared.Reads(readSource{s}).TokenByHash(ctx, p, s.now())
}

// TokenBySubject implements store.TokenStore.
func (s *Store) TokenBySubject(ctx context.Context, p *store.TokenBySubjectParams) (*store.Token, error) {
	return shared.Reads(readSource{s}).TokenBySubject(ctx, p, s.now())
}

// TokenList implements store.TokenStore.
func (s *Store) TokenList(ctx context.Context) ([]*store.Token, error) {
	return shared.Reads(readSource{s}).TokenList(ctx)
}

// TokenRevoke implements store.TokenStore.
func (s *Store) TokenRevoke(ctx context.Context, p *store.TokenRevokeParams) (*store.Token, error) {
	var t *store.Token
	err := s.write(ctx, func(tx *wtx) (err error) {
		t, err = shared.TokenRevoke(tx, p.Name)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("revoking token: %w", err)
	}
	return t, nil
}

// TokenRotate implements store.TokenStore.
func (s *Store) TokenRotate(ctx context.Context, p *store.TokenRotateParams) (*store.Token, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("rotating token: %w", err)
	}
	var t *store.Token
	err := s.write(ctx, func(tx *wtx) (err error) {
		t, err = shared.TokenRotate(tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("rotating token: %w", err)
	}
	return t, nil
}

// TokenTouch implements store.TokenStore.
func (s *Store) TokenTouch(ctx context.Context, p *store.TokenTouchParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("touching tokens: %w", err)
	}
	if len(p.Names) == 0 {
		return nil
	}
	// Advisory (last_used_at): lost in a crash without harm, so no fsync.
	err := s.writeNoSync(ctx, func(tx *wtx) error { return shared.TokenTouch(tx, p.Names) })
	if err != nil {
		return fmt.Errorf("touching tokens: %w", err)
	}
	return nil
}
