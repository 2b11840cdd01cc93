package storesqlite

import (
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// ForgetCommitMark drops the store's last reading of the foreign commit mark,
// so that the next ForeignCommitMark reads it again.
func ForgetCommitMark(s *Store) {
	s.mark.mu.Lock()
	defer s.mark.mu.Unlock()
	s.mark.at = time.Time{}
}

// ReuseCommitMark sets how long a reading of the foreign commit mark is handed
// out again.
func ReuseCommitMark(s *Store, d time.Duration) {
	s.mark.mu.Lock()
	defer s.mark.mu.Unlock()
	s.mark.reuse = d
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

// WriterCacheSize is the write connection's PRAGMA cache_size.
func WriterCacheSize(t testing.TB, s *Store) int {
	t.Helper()
	var n int
	err := s.submit(t.Context(), &request{ctx: t.Context(), done: make(chan error, 1), readOnly: true, alone: func(w *writer) error {
		return w.conn.QueryRowContext(t.Context(), "PRAGMA cache_size").Scan(&n)
	}})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// WriterCacheKiB is the write connection's page cache the store asks for.
const WriterCacheKiB = writerCacheKiB
