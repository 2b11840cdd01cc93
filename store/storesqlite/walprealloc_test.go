package storesqlite

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// TestWALPreallocate opens a store that writes its WAL ahead: the file is that
// long after Open (and not shortened by a second Open), runs are written into
// it, and a copy of the files taken while the store was open (what a crash
// leaves on disk) recovers every committed run: SQLite reads the zeros after
// the last frame as the end of the log.
func TestWALPreallocate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := t.TempDir()
	path := filepath.Join(dir, "t.db")
	const n = 2 << 20
	s, err := Open(ctx, Config{Path: path, WALPreallocate: n})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if st, err := os.Stat(path + "-wal"); err != nil || st.Size() < n {
		t.Fatalf("WAL after Open: %v %v, want at least %d bytes", st, err, n)
	}
	ids := []string{"a", "b", "c"}
	for _, id := range ids {
		if _, err := s.RunCreate(ctx, &store.RunCreateParams{Namespace: "ns", ID: id, WorkflowID: id, Workflow: "w", Queue: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := s.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "ns", Workflows: []string{"w"}, Max: 1, LeaseDuration: time.Minute})
	if err != nil || len(res.Runs) != 1 {
		t.Fatalf("claim: %v %v", res, err)
	}
	cr := res.Runs[0]
	if _, err := s.Checkpoint(ctx, &store.CheckpointParams{Lease: store.Lease{Namespace: "ns", RunID: cr.Run.ID, Token: cr.LeaseToken},
		Status: store.StatusSucceeded, Output: []byte(`"done"`)}); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path + "-wal"); err != nil || st.Size() != n {
		t.Errorf("WAL after a few commits: %v %v, want still %d bytes (written into, not grown)", st, err, n)
	}

	// What a crash leaves: the files as they are on disk, the store still open.
	crash := filepath.Join(t.TempDir(), "t.db")
	for _, suffix := range []string{"", "-wal"} {
		b, err := os.ReadFile(path + suffix)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(crash+suffix, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c, err := Open(ctx, Config{Path: crash})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, id := range ids {
		run, err := c.RunGet(ctx, &store.RunGetParams{Namespace: "ns", Ref: id})
		if err != nil {
			t.Fatalf("run %s after the crash: %v", id, err)
		}
		if id == cr.Run.ID && (run.Status != store.StatusSucceeded || string(run.Output) != `"done"`) {
			t.Errorf("run %s after the crash: %s %q, want succeeded \"done\"", id, run.Status, run.Output)
		}
	}

	// A second store on the same file finds the WAL long enough already.
	s2, err := Open(ctx, Config{Path: path, WALPreallocate: n / 2})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if st, err := os.Stat(path + "-wal"); err != nil || st.Size() != n {
		t.Errorf("WAL after a second Open asking for less: %v %v, want %d bytes", st, err, n)
	}
}
