package storesqlite_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// NoMigrate opens an existing, migrated store, and fails with ErrNoStore,
// creating nothing, when the file is missing or holds no Trellis store.
func TestOpenNoMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.db")
	_, err := storesqlite.Open(ctx, storesqlite.Config{Path: missing, NoMigrate: true})
	if !errors.Is(err, store.ErrNoStore) || !strings.Contains(err.Error(), "no Trellis store at "+missing) {
		t.Fatalf("Open(NoMigrate) of a missing file: %v, want ErrNoStore", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open(NoMigrate) created %s (stat: %v)", missing, err)
	}

	empty := filepath.Join(dir, "empty.db")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := storesqlite.Open(ctx, storesqlite.Config{Path: empty, NoMigrate: true}); !errors.Is(err, store.ErrNoStore) {
		t.Fatalf("Open(NoMigrate) of an empty file: %v, want ErrNoStore", err)
	}

	path := filepath.Join(dir, "t.db")
	s, err := storesqlite.Open(ctx, storesqlite.Config{Path: path})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = storesqlite.Open(ctx, storesqlite.Config{Path: path, NoMigrate: true})
	if err != nil {
		t.Fatalf("Open(NoMigrate) of a migrated store: %v", err)
	}
	if _, err := s.RunList(ctx, &store.RunListParams{Namespace: "default"}); err != nil {
		t.Fatalf("RunList: %v", err)
	}
	s.Close()
}
