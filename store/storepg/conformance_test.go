package storepg_test

import (
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/internal/pgtest/pgstore"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storepg"
	"github.com/trellis-dev/trellis/store/storetest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		return pgstore.OpenReused(t, now)
	})
}

// TestConformanceMerged runs the suite with every checkpoint sent as the multi-row
// statement that batches of several checkpoints use.
func TestConformanceMerged(t *testing.T) {
	storetest.Run(t, func(t *testing.T, now func() time.Time) store.Store {
		s := pgstore.OpenReused(t, now)
		storepg.MergeSingleCheckpoints(s)
		return s
	})
}
