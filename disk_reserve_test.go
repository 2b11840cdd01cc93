package trellis_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// freeBytes is the free space of the volume of dir.
func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bavail) * int64(st.Bsize)
}

// A volume fills up while starts keep arriving, from four clients without a
// pause (but for each keeping at most maxUnfinished of its runs unfinished:
// the reserve lets the runs that are running finish, not any backlog, see
// docs/storage.md), and stays nearly full: a little space is freed, and the
// starts go on. The runs acknowledged before the disk filled all finish meanwhile, and
// those acknowledged after once the starts stop: the store's disk reserve (8
// MiB here) gives them the space, and new starts are refused with
// ErrStorageFull (an error that says why and what to do) rather than taking
// the space first. Without the reserve (TRELLIS_TEST_NO_RESERVE=1 shows it),
// the starts took every byte freed, and acknowledged runs stayed running for
// the test's minute (issue 37).
func TestFullDiskReserveFinishesAcknowledgedRuns(t *testing.T) {
	t.Parallel()
	// About 7 KiB each to finish: four clients' unfinished runs take 5 of
	// the reserve's 8 MiB.
	const maxUnfinished = 200
	dir := smallVolume(t, "48m")
	dbPath := filepath.Join(dir, "trellis.db")
	logger := slog.New(slog.DiscardHandler)
	if os.Getenv("TRELLIS_DEBUG_DISKFULL") != "" {
		logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	reserve := int64(8 << 20)
	if os.Getenv("TRELLIS_TEST_NO_RESERVE") != "" { // to see the fault without the reserve
		reserve = -1
	}
	st, err := storesqlite.Open(context.Background(), storesqlite.Config{Path: dbPath, Logger: logger, WALLimit: 1 << 20,
		DiskReserve: reserve})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	payload := strings.Repeat("x", 2<<10)
	wf := trellis.NewWorkflow("disk-reserve", func(wc *trellis.Context, n int) (int, error) {
		for range 3 {
			if _, err := trellis.Step(wc, "write", func(context.Context) (string, error) { return payload, nil }); err != nil {
				return 0, err
			}
		}
		return n, nil
	})
	c := open(t, "", func(cfg *trellis.Config) {
		cfg.Backend = st
		cfg.Logger = logger
		cfg.Worker.LeaseDuration = time.Second // runs whose checkpoint failed are taken over soon
		cfg.Worker.Concurrency = 16
	})
	register(t, c, wf)
	// Leave 12 MiB free beside the store and its reserve.
	filler := filepath.Join(dir, "filler")
	fill(t, filler, int(freeBytes(t, dir)-12<<20))

	var (
		mu       sync.Mutex
		acked    []string
		refused  error // the first ErrStorageFull
		fullOnce sync.Once
		full     = make(chan struct{})
		wg       sync.WaitGroup
	)
	ctx, stop := context.WithCancel(context.Background())
	defer func() { stop(); wg.Wait() }()
	for range 4 {
		wg.Go(func() {
			var mine []string // this client's runs that may not have finished
			for ctx.Err() == nil {
				if len(mine) == maxUnfinished {
					if _, err := c.Wait(ctx, mine[0]); err != nil {
						return
					}
					mine = mine[1:]
				}
				h, err := trellis.Start(ctx, c, wf, 1)
				if err != nil {
					if strings.Contains(err.Error(), "full") {
						fullOnce.Do(func() { close(full) })
					}
					mu.Lock()
					if errors.Is(err, trellis.ErrStorageFull) && refused == nil {
						refused = err
					}
					mu.Unlock()
					continue
				}
				mine = append(mine, h.RunID())
				mu.Lock()
				acked = append(acked, h.RunID())
				mu.Unlock()
			}
		})
	}
	select {
	case <-full:
	case <-time.After(60 * time.Second):
		t.Fatal("the volume never filled up")
	}
	mu.Lock()
	before := append([]string(nil), acked...)
	mu.Unlock()
	time.Sleep(time.Second)
	// A little space comes back (a log rotated, say); the starts go on.
	if err := os.Truncate(filler, max(0, fileSizeOf(t, filler)-1<<20)); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, id := range before {
		run, err := c.Wait(wctx, id)
		if err != nil || run.Status != trellis.StatusSucceeded {
			cur, gerr := c.Get(context.Background(), id)
			page, _ := c.List(context.Background(), trellis.ListOptions{Workflow: "disk-reserve",
				Statuses: []trellis.Status{trellis.StatusPending, trellis.StatusRunning}, Limit: 1000})
			var unfinished int
			if page != nil {
				unfinished = len(page.Runs)
			}
			t.Fatalf("run %s, acknowledged before the disk filled, while starts go on: %v, %v (now %+v, %v); "+
				"%d runs acknowledged before, %d unfinished; the database %d bytes, its WAL %d, its reserve %d, %d free",
				id, run, err, cur, gerr, len(before), unfinished, fileSizeOf(t, dbPath), fileSizeOf(t, dbPath+"-wal"),
				fileSizeOf(t, dbPath+"-reserve"), freeBytes(t, dir))
		}
	}
	stop()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	for _, id := range acked[len(before):] { // and those acknowledged since
		if run, err := c.Wait(wctx, id); err != nil || run.Status != trellis.StatusSucceeded {
			t.Fatalf("run %s, acknowledged after the disk filled: %v, %v", id, run, err)
		}
	}
	if refused == nil {
		t.Fatal("no start was refused with ErrStorageFull")
	}
	if msg := refused.Error(); !strings.Contains(msg, "disk reserve") || !strings.Contains(msg, "free disk space") {
		t.Errorf("a refused start says %q: want it to name the disk reserve and what to do", msg)
	}
	t.Logf("%d runs acknowledged before the disk filled finished while starts went on (%d acknowledged in all); a refused start: %v",
		len(before), len(acked), refused)
}

func fileSizeOf(t *testing.T, path string) int64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}
