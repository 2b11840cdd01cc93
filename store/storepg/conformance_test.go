package storepg_test

import (
	"os"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/internal/pgtest/pgstore"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storepg"
	"github.com/trellis-dev/trellis/store/storetest"
)

// openTest opens a store on a fresh schema, closed at cleanup (before the schema is
// dropped: cleanups run last-registered first).
func openTest(t *testing.T, now func() time.Time) *storepg.Store {
	t.Helper()
	return pgstore.Open(t, pgtest.SchemaURL(t), now)
}

// openReused is openTest on a schema of pgtest.ReusedSchemaURL: a conformance
// case's store is closed, then emptied for the next case.
func openReused(t *testing.T, now func() time.Time) *storepg.Store {
	t.Helper()
	return pgstore.Open(t, pgtest.ReusedSchemaURL(t), now)
}

func TestMain(m *testing.M) {
	code := m.Run()
	pgtest.DropReused()
	os.Exit(code)
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		return openReused(t, now)
	})
}

// TestConformanceMerged runs the suite with every checkpoint sent as the multi-row
// statement that batches of several checkpoints use.
func TestConformanceMerged(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		s := openReused(t, now)
		storepg.MergeSingleCheckpoints(s)
		return s
	})
}
