package trellis_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// smallVolume mounts a tmpfs of size bytes on a temporary directory and unmounts
// it at cleanup. Without permission to mount it skips the test, except in CI
// (CI=true), where it fails.
func smallVolume(t *testing.T, size string) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput()
	if err != nil {
		msg := "mounting a " + size + " tmpfs (needs root): " + strings.TrimSpace(string(out))
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip("skipping: " + msg)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("unmounting %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

// fill writes a file of n bytes, or as much of it as fits.
func fill(t *testing.T, path string, n int) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for written := 0; written < n; written += len(buf) {
		if _, err := f.Write(buf); err != nil {
			return
		}
	}
}

// TestFullDiskRecovers fills the SQLite store's volume under load, frees space,
// and checks that every run whose Start returned nil finishes and that the WAL
// stays bounded (it used to keep growing until it filled the volume by itself,
// after which every write failed for good).
func TestFullDiskRecovers(t *testing.T) {
	t.Parallel()
	// The filler leaves about 2 MiB for the store, and frees 13 MiB when removed:
	// under heavy load (CI runs many packages at once) readers can hold the WAL
	// past its limit until the disk fills, and the TRUNCATE that recovers must
	// copy it into the database file first. With 5 MiB freed, a CI run in which
	// two test processes shared the two cores saw the acknowledged runs' last
	// steps grow the WAL, still held by readers, into all of it before a
	// checkpoint could finish; the store then had no room to checkpoint into.
	// (That is what a volume this small makes of any store; the test's point is
	// that space given back is used to recover, not kept by the WAL for good.)
	dir := smallVolume(t, "16m")
	filler := filepath.Join(dir, "filler")
	fill(t, filler, 13<<20)
	payload := strings.Repeat("x", 2<<10)
	wf := trellis.NewWorkflow("disk-filler", func(wc *trellis.Context, n int) (int, error) {
		for range 3 {
			if _, err := trellis.Step(wc, "write", func(context.Context) (string, error) { return payload, nil }); err != nil {
				return 0, err
			}
		}
		return n, nil
	})
	dbPath := filepath.Join(dir, "trellis.db")
	const walLimit = 1 << 20
	logger := slog.New(slog.DiscardHandler)
	if os.Getenv("TRELLIS_DEBUG_DISKFULL") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	// A disk reserve that fits the volume (the default's 32 MiB does not):
	// starts are refused, "storage full", before the volume is.
	st, err := storesqlite.Open(context.Background(), storesqlite.Config{Path: dbPath, Logger: logger, WALLimit: walLimit,
		DiskReserve: 512 << 10})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c := open(t, "", func(cfg *trellis.Config) {
		cfg.Backend = st
		cfg.Logger = logger
		cfg.Worker.LeaseDuration = time.Second // runs whose checkpoint failed are taken over soon
		cfg.Worker.Concurrency = 16
	})
	register(t, c, wf)

	acked := startUntilFull(t, c, wf)
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, id := range acked {
		run, err := c.Wait(ctx, id)
		if err != nil {
			cur, gerr := c.Get(context.Background(), id)
			var wal int64
			if st, err := os.Stat(dbPath + "-wal"); err == nil {
				wal = st.Size()
			}
			t.Fatalf("waiting for acknowledged run %s after space returned: %v (run %+v, %v; WAL %d bytes)",
				id, err, cur, gerr, wal)
		}
		if run.Status != trellis.StatusSucceeded {
			t.Fatalf("acknowledged run %s ended %s (%+v)", id, run.Status, run.Error)
		}
	}
	// One more run after recovery, then the WAL must become small again. The
	// checkpointer looks at the WAL once a second, so it is given a few looks: a
	// run that recovered in less than one (as without the race detector) finds
	// the WAL as the full disk left it. Starts are refused until the reserve is
	// held again, which waits for room for the WAL to grow back to the size it
	// had when the disk filled (storesqlite's diskReserve): under load, a WAL
	// that readers held had grown large, and only its checkpoint gives the room
	// back, so the start is tried again meanwhile.
	var h *trellis.Handle[int]
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var err error
		if h, err = trellis.Start(ctxT(t), c, wf, 0); err == nil {
			break
		}
		if !errors.Is(err, trellis.ErrStorageFull) || time.Now().After(deadline) {
			t.Fatalf("a start after space returned: %v", err)
		}
	}
	mustResult(t, h)
	var walSize int64
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		wal, err := os.Stat(dbPath + "-wal")
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		walSize = 0
		if err == nil {
			walSize = wal.Size()
		}
		// A burst may pass the limit by as much as it writes in a second, not
		// by the whole volume.
		if walSize <= 3*walLimit || time.Now().After(deadline) {
			break
		}
	}
	if walSize > 3*walLimit {
		t.Fatalf("WAL is %d bytes 10 s after recovery, want it bounded (limit %d)", walSize, walLimit)
	}
	t.Logf("%d runs acknowledged before the disk filled; all finished", len(acked))
}

// startUntilFull starts runs from several goroutines until starts fail with a
// full disk, and returns the IDs of those acknowledged.
func startUntilFull(t *testing.T, c *trellis.Client, wf *trellis.Workflow[int, int]) []string {
	t.Helper()
	var (
		mu    sync.Mutex
		acked []string
		full  = make(chan struct{})
		once  sync.Once
		wg    sync.WaitGroup
	)
	deadline := time.Now().Add(30 * time.Second)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				select {
				case <-full:
					return
				default:
				}
				h, err := trellis.Start(context.Background(), c, wf, 1)
				if err != nil {
					if strings.Contains(err.Error(), "full") {
						once.Do(func() { close(full) })
						return
					}
					// A transaction SQLite rolled back by itself is reported
					// with the error that made it, not the failed ROLLBACK.
					if strings.Contains(err.Error(), "no transaction is active") {
						t.Errorf("start failed with %v, want the write's own error", err)
					}
					continue
				}
				mu.Lock()
				acked = append(acked, h.RunID())
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	select {
	case <-full:
	default:
		t.Fatal("the volume never filled up")
	}
	return acked
}

// TestWALPreallocateOnAFullDisk asks a store on a 6 MiB volume to write 64 MiB
// of WAL ahead: Open still succeeds, the WAL is left as it was (not a volume
// filled with zeros), and the store writes.
func TestWALPreallocateOnAFullDisk(t *testing.T) {
	t.Parallel()
	dir := smallVolume(t, "6m")
	path := filepath.Join(dir, "t.db")
	st, err := storesqlite.Open(context.Background(), storesqlite.Config{Path: path, WALPreallocate: 64 << 20, WALLimit: 64 << 20,
		DiskReserve: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if fi, err := os.Stat(path + "-wal"); err != nil || fi.Size() >= 4<<20 {
		t.Fatalf("WAL after a preallocation that did not fit: %v %v, want it as it was", fi, err)
	}
	wf := trellis.NewWorkflow("prealloc", func(wc *trellis.Context, n int) (int, error) { return n, nil })
	c := open(t, "", func(cfg *trellis.Config) { cfg.Backend = st })
	register(t, c, wf)
	h, err := trellis.Start(context.Background(), c, wf, 7)
	if err != nil {
		t.Fatalf("start after the failed preallocation: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if got, err := h.Result(ctx); err != nil || got != 7 {
		t.Fatalf("result = %v, %v; want 7", got, err)
	}
}
