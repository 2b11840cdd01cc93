package storesqlite

import (
	"context"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// The audit log is written once, in sqlstore (audit.go); these are its entry
// points.

// AuditAppend implements store.AuditStore.
func (s *Store) AuditAppend(ctx context.Context, p *store.AuditAppendParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("appending audit entries: %w", err)
	}
	err := s.write(ctx, func(tx *wtx) error {
		return shared.AuditAppend(tx, p)
	})
	if err != nil {
		return fmt.Errorf("appending audit entries: %w", err)
	}
	return nil
}

// AuditList implements store.AuditStore.
func (s *Store) AuditList(ctx context.Context, p *store.AuditListParams) (*store.AuditListResult, error) {
	return shared.Reads(readSource{s}).AuditList(ctx, p)
}

// AuditNamespaces implements store.AuditStore.
func (s *Store) AuditNamespaces(ctx context.Context) ([]string, error) {
	return shared.Reads(readSource{s}).AuditNamespaces(ctx)
}

// AuditPurge implements store.AuditStore.
func (s *Store) AuditPurge(ctx context.Context, p *store.AuditPurgeParams) (int, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("purging audit entries: %w", err)
	}
	var n int
	err := s.writeNoSync(ctx, func(tx *wtx) (err error) {
		n, err = shared.AuditPurge(tx, p)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("purging audit entries: %w", err)
	}
	return n, nil
}
