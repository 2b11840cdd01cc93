package storepg_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/internal/pgtest/pgstore"
	"github.com/trellis-dev/trellis/store"
)

// takeUntil takes from feed until it reports runID (or, with all, a loss).
func takeUntil(t *testing.T, feed store.RunFeed, what, runID string, wantAll bool) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case <-feed.Changed():
			ids, all := feed.Take()
			if (wantAll && all) || (!wantAll && slices.Contains(ids, runID)) {
				return
			}
		case <-deadline:
			t.Fatalf("%s: not reported", what)
		}
	}
}

// A run feed carries other stores' commits (another process, in production): a
// run that ends elsewhere is named; after the listener reconnects, the feed
// reports that signals may have been lost.
func TestRunFeedAcrossStores(t *testing.T) {
	t.Parallel()
	url := pgtest.SchemaURL(t)
	a, b := pgstore.Open(t, url, nil), pgstore.Open(t, url, nil)
	feed, crossProcess := b.WatchRuns("ns")
	defer feed.Stop()
	if !crossProcess {
		t.Fatal("WatchRuns: crossProcess = false on Postgres")
	}
	create(t, a, "r1")
	takeUntil(t, feed, "run created in another store", "r1", false)
	if _, err := a.RunCancel(t.Context(), &store.RunCancelParams{Namespace: "ns", Ref: "r1"}); err != nil {
		t.Fatal(err)
	}
	takeUntil(t, feed, "run ended in another store", "r1", false)

	conn, err := pgx.Connect(t.Context(), pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE query = 'LISTEN "trellis.'||$1||'"'`, schemaOf(t, url)); err != nil {
		t.Fatal(err)
	}
	takeUntil(t, feed, "loss after the listener reconnected", "", true)
}
