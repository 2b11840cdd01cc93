package trellis_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
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

// setFree grows or shrinks filler, a file on dir's volume, until the volume
// has about want bytes free.
func setFree(t *testing.T, dir, filler string, want int64) {
	t.Helper()
	delta := freeBytes(t, dir) - want
	if delta <= 0 {
		if err := os.Truncate(filler, max(0, fileSizeOf(t, filler)+delta)); err != nil {
			t.Fatal(err)
		}
		return
	}
	f, err := os.OpenFile(filler, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, delta)); err != nil {
		t.Fatal(err)
	}
}

// Starts are refused as soon as less than half the reserve is free beside it,
// not only at the next look at the volume after a WAL checkpoint (once a
// second): while the volume is near that point, starts look at it every 10
// ms. Once refused, they are accepted again only when a whole reserve is free
// beside it. Nothing failed to write meanwhile: the reserve is still held.
func TestDiskReserveRefusesBeforeTheDiskFills(t *testing.T) {
	t.Parallel()
	dir := smallVolume(t, "48m")
	dbPath := filepath.Join(dir, "trellis.db")
	const reserve = 4 << 20 // large beside what a start writes or a WAL checkpoint moves
	filler := filepath.Join(dir, "filler")
	fill(t, filler, 0)
	setFree(t, dir, filler, 5<<20+reserve) // not yet near: five reserves free beside it once it is taken
	st, err := storesqlite.Open(context.Background(), storesqlite.Config{Path: dbPath, Logger: slog.New(slog.DiscardHandler),
		DiskReserve: reserve})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	n := 0
	start := func() error {
		n++
		id := fmt.Sprintf("r%d", n)
		_, err := st.RunCreate(context.Background(), &store.RunCreateParams{Namespace: "default", ID: id, WorkflowID: id,
			Workflow: "w", Queue: "default"})
		return err
	}
	if err := start(); err != nil {
		t.Fatalf("a start with room: %v", err)
	}
	// The volume's free space is what is free beside the reserve (its file
	// holds its bytes).
	setFree(t, dir, filler, 2*reserve) // near: two reserves free beside it
	time.Sleep(20 * time.Millisecond)
	if err := start(); err != nil { // this one looks, and is let in
		t.Fatalf("a start with two reserves free: %v", err)
	}
	setFree(t, dir, filler, reserve*3/8) // under half a reserve beside it, over a quarter
	time.Sleep(20 * time.Millisecond)
	if err := start(); !errors.Is(err, trellis.ErrStorageFull) {
		t.Fatalf("a start with %d bytes free beside the reserve: %v, want ErrStorageFull", freeBytes(t, dir), err)
	}
	if size := fileSizeOf(t, dbPath+"-reserve"); size != reserve {
		t.Fatalf("the reserve file holds %d bytes, want %d: it was given back", size, reserve)
	}
	setFree(t, dir, filler, reserve*3/4) // three quarters of a reserve beside it: still refused
	time.Sleep(120 * time.Millisecond)
	if err := start(); !errors.Is(err, trellis.ErrStorageFull) {
		t.Fatalf("a start with three quarters of a reserve free beside it, once refusing: %v, want ErrStorageFull", err)
	}
	setFree(t, dir, filler, 2*reserve)
	time.Sleep(120 * time.Millisecond)
	if err := start(); err != nil {
		t.Fatalf("a start with two reserves free beside it: %v", err)
	}
}
