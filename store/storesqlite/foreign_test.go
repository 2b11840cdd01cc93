package storesqlite_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/sqlitedrv"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// The foreign commit mark stays the same across the store's own commits and
// the checkpointer's passive checkpoints, changes when another store on the
// same file commits, and is read once for the callers of a short while.
func TestForeignCommitMark(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, _, cfg := setup(t)
	var _ store.ForeignCommits = s
	storesqlite.ReuseCommitMark(s, time.Hour) // no reading expires while the test runs
	mark := func() int64 {
		t.Helper()
		storesqlite.ForgetCommitMark(s)
		m, err := s.ForeignCommitMark(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	m0 := mark()
	ckpt, err := sqlitedrv.Open("file:" + cfg.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer ckpt.Close()
	for i := range 50 {
		createRun(t, s, fmt.Sprintf("own-%d", i))
		if i%10 == 0 {
			if _, err := ckpt.ExecContext(ctx, "PRAGMA wal_checkpoint(PASSIVE)"); err != nil {
				t.Fatal(err)
			}
		}
	}
	claimAll(t, s, 50)
	if m := mark(); m != m0 {
		t.Fatalf("mark %d → %d across the store's own commits", m0, m)
	}
	other, err := storesqlite.Open(ctx, storesqlite.Config{Path: cfg.Path})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	createRun(t, other, "elsewhere")
	m1 := mark()
	if m1 == m0 {
		t.Fatal("mark unchanged after another store's commit")
	}
	createRun(t, s, "own-again")
	if m := mark(); m != m1 {
		t.Fatalf("mark %d → %d across the store's own commit", m1, m)
	}
	// A reading commits nothing: the store's Stats count write transactions.
	before := s.Stats()
	mark()
	if after := s.Stats(); after != before {
		t.Fatalf("Stats %+v → %+v across a reading of the mark", before, after)
	}
	// While a reading is reused, it is handed out again: another store's commit
	// shows only in the next reading.
	createRun(t, other, "elsewhere-again")
	if m, err := s.ForeignCommitMark(ctx); err != nil || m != m1 {
		t.Fatalf("ForeignCommitMark while reused = %d, %v, want %d", m, err, m1)
	}
	if m := mark(); m == m1 {
		t.Fatal("mark unchanged after another store's second commit")
	}
	_ = s.Close()
	storesqlite.ForgetCommitMark(s)
	if _, err := s.ForeignCommitMark(ctx); err == nil {
		t.Fatal("ForeignCommitMark on a closed store: no error")
	}
}
