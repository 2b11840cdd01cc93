package storepg

import (
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// MergeSingleCheckpoints makes s send even a lone checkpoint as the multi-row
// statement of a batch (sqlCheckpoints), so the conformance suite covers it.
func MergeSingleCheckpoints(s *Store) { s.mergeSingle = true }

// ConnectTimeoutOf returns the connect timeout the pool of cfg would use.
func ConnectTimeoutOf(t interface{ Fatal(...any) }, cfg Config) time.Duration {
	pc, err := poolConfig(cfg.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	return pc.ConnConfig.ConnectTimeout
}

// BlobRows counts the payloads stored apart in the table blobs.
func BlobRows(t testing.TB, s *Store) int {
	t.Helper()
	var n int
	if err := (seam{s}).Read(t.Context(), func(q sqlstore.Querier) error {
		return q.QueryRow(`SELECT COUNT(*) FROM blobs`).Scan(&n)
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

// KeyedPipelined counts the batches of keyed creates s committed in its
// pipelined transaction (keyedPipelined).
func KeyedPipelined(s *Store) int64 { return s.k.pipelined.Load() }

// KeyedLone counts the lone keyed creates s made in one statement (keyedOne).
func KeyedLone(s *Store) int64 { return s.k.lone.Load() }

// KeyedMispredicted counts the responses of lone keyed creates s corrected
// after their commit (keyedOne): the response rendered before the create
// differed from the one rendered from the run created.
func KeyedMispredicted(s *Store) int64 { return s.k.mispredicted.Load() }
