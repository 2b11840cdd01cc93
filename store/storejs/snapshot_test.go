package storejs_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storejs"
)

// TestRebuildFromSnapshotAndLogEqualsTheWriters runs the workload on a
// writer that takes a snapshot every 50ms and compacts the log behind it,
// then rebuilds a replica: from the newest snapshot and the log after it,
// equal to the writer's. A store on the writer's replica holds the lease
// meanwhile, so that the rebuilt one, which cannot take it, writes nothing.
func TestRebuildFromSnapshotAndLogEqualsTheWriters(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newCluster(t)
	cfg := c.config("writer")
	cfg.SnapshotInterval, cfg.CompactMargin = 50*time.Millisecond, 5
	workloadOn(ctx, t, cfg, 60, nil)
	holder := c.open(c.config("writer"))
	storejs.WaitLeading(t, holder)
	first, last, err := holder.LogBounds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	infos, err := holder.SnapshotBucket().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("log from %d to %d, %d snapshots", first, last, len(infos))
	if len(infos) != 2 {
		t.Errorf("%d snapshots kept, want 2", len(infos))
	}
	if first <= 1 {
		t.Errorf("the log starts at %d: never compacted", first)
	}
	r := c.open(c.config("rebuilt"))
	if got := r.Restored(); got == 0 || got < first-1 || got > last {
		t.Errorf("restored the snapshot at %d, want one between %d and %d", got, first-1, last)
	}
	if got := r.AppliedSeq(); got != last {
		t.Errorf("the rebuilt replica reached %d, want the log's end %d", got, last)
	}
	r.Close()
	compareDumps(t, dump(t, cfg.Replica), dump(t, c.config("rebuilt").Replica))
}

// cluster is one nats-server with JetStream that several stores share.
type cluster struct {
	t   *testing.T
	srv *server.Server
	dir string
}

func newCluster(t *testing.T) *cluster {
	t.Helper()
	srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	return &cluster{t: t, srv: srv, dir: t.TempDir()}
}

// config is a store on the cluster with replica name.db, snapshots taken
// by hand, and a compaction margin of one record.
func (c *cluster) config(name string) storejs.Config {
	nc, err := nats.Connect(c.srv.ClientURL())
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(nc.Close)
	return storejs.Config{Conn: nc, Replica: filepath.Join(c.dir, name+".db"), LeaseDuration: time.Hour,
		SnapshotEvery: -1, SnapshotInterval: -1, CompactMargin: 1}
}

func (c *cluster) open(cfg storejs.Config) *storejs.Store {
	c.t.Helper()
	s, err := storejs.Open(context.Background(), cfg)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { s.Close() })
	return s
}

func createRuns(t *testing.T, s *storejs.Store, prefix string, n int) {
	t.Helper()
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		_, err := storejs.View(s).RunCreate(context.Background(), &store.RunCreateParams{Namespace: "default", ID: id,
			WorkflowID: id, Workflow: "wf", Queue: "default", Input: []byte(`{"n":1}`)})
		if err != nil {
			t.Fatal(err)
		}
	}
}

// TestFollowerBehindACompactionRestores closes a follower, compacts the
// log past its position while it is down, and reopens it: it restores the
// newest snapshot, applies the log after it, and equals the writer.
func TestFollowerBehindACompactionRestores(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t)
	w := c.open(c.config("writer"))
	storejs.WaitLeading(t, w)
	createRuns(t, w, "early", 30)
	fcfg := c.config("follower")
	f := c.open(fcfg)
	behind := f.AppliedSeq()
	if behind == 0 {
		t.Fatal("the follower applied nothing")
	}
	f.Close()
	fcfg = c.config("follower") // Close closed its connection

	createRuns(t, w, "middle", 60)
	older, err := w.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	createRuns(t, w, "late", 20)
	newer, err := w.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	createRuns(t, w, "last", 20)
	first, last, err := w.LogBounds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("follower at %d; snapshots at %d and %d; log from %d to %d", behind, older, newer, first, last)
	if first != older+1 {
		t.Errorf("the log starts at %d after compaction, want %d (after the older kept snapshot)", first, older+1)
	}

	f = c.open(fcfg)
	if got := f.Restored(); got != newer {
		t.Errorf("the follower restored the snapshot at %d, want the newest, %d", got, newer)
	}
	if got := f.AppliedSeq(); got != last {
		t.Errorf("the follower reached %d, want the log's end %d", got, last)
	}
	if _, err := storejs.View(f).RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: "last-19"}); err != nil {
		t.Errorf("a run written after the snapshot: %v", err)
	}
	f.Close()
	compareDumps(t, dump(t, c.config("writer").Replica), dump(t, fcfg.Replica))
}

// TestCorruptSnapshotIsRefused alters the newest snapshot: a rebuild falls
// back to the older one (and equals the writer); with both altered and the
// log compacted past the start, Open fails saying why and leaves no replica.
func TestCorruptSnapshotIsRefused(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t)
	w := c.open(c.config("writer"))
	storejs.WaitLeading(t, w)
	createRuns(t, w, "a", 60)
	older, err := w.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	createRuns(t, w, "b", 30)
	newer, err := w.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	createRuns(t, w, "c", 20)
	bucket := w.SnapshotBucket()
	alter(t, bucket, newer)

	rcfg := c.config("rebuilt")
	r := c.open(rcfg)
	if got := r.Restored(); got != older {
		t.Errorf("restored the snapshot at %d, want the older one at %d (the newer is altered)", got, older)
	}
	if got := r.AppliedSeq(); got != w.AppliedSeq() {
		t.Errorf("the rebuilt replica reached %d, want the writer's %d", got, w.AppliedSeq())
	}
	r.Close()
	compareDumps(t, dump(t, c.config("writer").Replica), dump(t, rcfg.Replica))

	alter(t, bucket, older)
	bad := c.config("refused")
	_, err = storejs.Open(ctx, bad)
	if err == nil {
		t.Fatal("opened a replica with both snapshots altered and the log compacted")
	}
	t.Logf("open: %v", err)
	for _, want := range []string{"compacted", "SHA-256", fmt.Sprintf("seq-%020d", older), fmt.Sprintf("seq-%020d", newer)} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error does not say %q", want)
		}
	}
	if left, _ := filepath.Glob(bad.Replica + "*"); len(left) > 0 {
		t.Errorf("a refused restore left files: %v", left)
	}
}

// alter replaces the snapshot at seq by its bytes with one flipped, keeping
// its metadata.
func alter(t *testing.T, bucket jetstream.ObjectStore, seq uint64) {
	t.Helper()
	ctx := context.Background()
	name := fmt.Sprintf("seq-%020d", seq)
	info, err := bucket.GetInfo(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	data, err := bucket.GetBytes(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x55
	if _, err := bucket.Put(ctx, info.ObjectMeta, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
}

// TestMeasureSnapshot takes a snapshot of the store under
// STOREJS_SNAPSHOT_DIR (a jetstream: store's directory) and reports its
// time and size: a tool for measuring rebuilds, skipped without it.
func TestMeasureSnapshot(t *testing.T) {
	dir := os.Getenv("STOREJS_SNAPSHOT_DIR")
	if dir == "" {
		t.Skip("STOREJS_SNAPSHOT_DIR not set")
	}
	ctx := context.Background()
	s, err := storejs.Open(ctx, storejs.Config{Dir: dir, SnapshotEvery: -1, SnapshotInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storejs.WaitLeading(t, s)
	first, last, _ := s.LogBounds(ctx)
	if os.Getenv("STOREJS_SNAPSHOT_DROP") == "1" {
		infos, _ := s.SnapshotBucket().List(ctx)
		for _, info := range infos {
			if err := s.SnapshotBucket().Delete(ctx, info.Name); err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("log %d..%d; deleted %d snapshots", first, last, len(infos))
		return
	}
	start := time.Now()
	seq, err := s.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	info, err := s.SnapshotBucket().GetInfo(ctx, fmt.Sprintf("seq-%020d", seq))
	if err != nil {
		t.Fatal(err)
	}
	nfirst, _, _ := s.LogBounds(ctx)
	t.Logf("log %d..%d; snapshot at %d, %d bytes, taken, uploaded and compacted in %s; the log now starts at %d",
		first, last, seq, info.Size, took, nfirst)
}

// TestSnapshotOfAnotherLogIsRefused puts a snapshot of another cluster's
// log, whole and with its own metadata, in a cluster's bucket: a rebuild
// refuses it (the log's next record does not follow it) and applies the
// whole log instead, equal to the writer.
func TestSnapshotOfAnotherLogIsRefused(t *testing.T) {
	ctx := context.Background()
	other := newCluster(t)
	o := other.open(other.config("writer"))
	storejs.WaitLeading(t, o)
	createRuns(t, o, "other", 10)
	seq, err := o.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t)
	w := c.open(c.config("writer"))
	storejs.WaitLeading(t, w)
	createRuns(t, w, "mine", 120)
	if _, last, _ := w.LogBounds(ctx); last <= seq {
		t.Fatalf("the log ends at %d, not past the foreign snapshot's %d", last, seq)
	}
	name := fmt.Sprintf("seq-%020d", seq)
	info, err := o.SnapshotBucket().GetInfo(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	data, err := o.SnapshotBucket().GetBytes(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.SnapshotBucket().Put(ctx, info.ObjectMeta, bytes.NewReader(data)); err != nil {
		t.Fatal(err)
	}
	rcfg := c.config("rebuilt")
	var logged syncBuffer
	rcfg.Logger = slog.New(slog.NewTextHandler(&logged, nil))
	r := c.open(rcfg)
	if got := r.Restored(); got != 0 {
		t.Errorf("restored the other log's snapshot at %d", got)
	}
	if !strings.Contains(logged.String(), "does not follow it") {
		t.Errorf("the refusal was not logged with its reason:\n%s", logged.String())
	}
	r.Close()
	compareDumps(t, dump(t, c.config("writer").Replica), dump(t, rcfg.Replica))
}

// syncBuffer is a bytes.Buffer a logger writes to from several goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestWriterSnapshotsEveryNRecords: with snapshot_every=20 and no
// interval, the writer takes snapshots by itself as the log grows, the
// newest within 20 records (and a poll) of the log's end.
func TestWriterSnapshotsEveryNRecords(t *testing.T) {
	ctx := context.Background()
	c := newCluster(t)
	cfg := c.config("writer")
	cfg.SnapshotEvery = 20
	w := c.open(cfg)
	storejs.WaitLeading(t, w)
	createRuns(t, w, "r", 100)
	_, last, err := w.LogBounds(ctx)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		infos, err := w.SnapshotBucket().List(ctx)
		newest := uint64(0)
		for _, info := range infos {
			var seq uint64
			fmt.Sscanf(info.Name, "seq-%d", &seq)
			newest = max(newest, seq)
		}
		if err == nil && newest+20 > last {
			t.Logf("%d snapshots, the newest at %d; the log ends at %d", len(infos), newest, last)
			if len(infos) > 2 {
				t.Errorf("%d snapshots kept, want 2", len(infos))
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no snapshot within 20 records of the log's end %d in 10s (newest %d, %v)", last, newest, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
