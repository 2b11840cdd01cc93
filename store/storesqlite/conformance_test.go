package storesqlite_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
	"github.com/trellis-dev/trellis/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		s, err := storesqlite.Open(context.Background(), storesqlite.Config{Path: filepath.Join(t.TempDir(), "t.db"), Now: now})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
