package storejs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/trellis-dev/trellis/store"
)

func openStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	s, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func waitLeading(t *testing.T, s *Store) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !s.Leading() {
		if time.Now().After(deadline) {
			t.Fatal("the store did not take the lease in 20s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func createRun(ctx context.Context, s store.Store, id string) error {
	_, err := s.RunCreate(ctx, &store.RunCreateParams{Namespace: "default", ID: id, WorkflowID: id, Workflow: "wf", Queue: "default"})
	return err
}

func TestFencedWriterIsRefusedAndItsBatchInvisible(t *testing.T) {
	ctx := context.Background()
	a, b := writerAndFollower(t, func(a *Store) {
		if err := createRun(ctx, view(a), "before"); err != nil {
			t.Fatal(err)
		}
	})
	if b.Leading() {
		t.Fatal("a second store leads while the first holds the lease")
	}
	if err := b.TakeOver(ctx); err != nil {
		t.Fatal(err)
	}
	if !a.Leading() {
		t.Fatal("the deposed writer noticed before writing: this test wants it to find out by its append")
	}
	// The deposed writer's next batch: refused by the log, rolled back.
	_, err := a.rep.RunCreate(ctx, &store.RunCreateParams{Namespace: "default", ID: "zombie", WorkflowID: "zombie", Workflow: "wf", Queue: "default"})
	if !errors.Is(err, errFenced) {
		t.Fatalf("deposed writer's batch: %v, want it refused as fenced", err)
	}
	if err := createRun(ctx, view(b), "after"); err != nil {
		t.Fatal(err)
	}
	seq := b.appliedSeq()
	waitCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := a.waitApplied(waitCtx, seq); err != nil {
		t.Fatalf("the deposed writer does not follow the log: %v", err)
	}
	for name, s := range map[string]*Store{"deposed": a, "new writer": b} {
		for id, want := range map[string]bool{"before": true, "after": true, "zombie": false} {
			_, err := s.rep.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: id})
			if got := err == nil; got != want || (!want && !errors.Is(err, store.ErrRunNotFound)) {
				t.Errorf("%s replica: run %s: %v, want present=%v", name, id, err, want)
			}
		}
	}
	if a.Leading() {
		t.Error("the deposed writer still thinks it writes")
	}
}

// proxy relays a NATS connection and can hold back what the server sends
// (acknowledgements among it) for a while.
type proxy struct {
	l    net.Listener
	held atomic.Bool
	wg   sync.WaitGroup
}

func newProxy(t *testing.T, upstream string) *proxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{l: l}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			p.wg.Add(2)
			go func() { defer p.wg.Done(); io.Copy(u, c); u.Close() }()
			go func() { defer p.wg.Done(); p.down(c, u); c.Close() }()
		}
	}()
	t.Cleanup(func() { l.Close(); p.wg.Wait() })
	return p
}

func (p *proxy) down(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		for p.held.Load() {
			time.Sleep(5 * time.Millisecond)
		}
		n, err := src.Read(buf)
		if n > 0 {
			for p.held.Load() {
				time.Sleep(5 * time.Millisecond)
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func TestLostAcknowledgementAppliesOnceOrNotAtAll(t *testing.T) {
	defer SetPublishTimeout(200 * time.Millisecond)()
	ctx := context.Background()
	srv := startNATS(t, t.TempDir())
	p := newProxy(t, srv.Addr().String())
	nc, err := nats.Connect("nats://"+p.l.Addr().String(), nats.Timeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	dir := t.TempDir()
	s := openStore(t, Config{Conn: nc, Replica: filepath.Join(dir, "a.db"), LeaseDuration: time.Hour})
	waitLeading(t, s)
	for i, hold := range []time.Duration{500 * time.Millisecond, 2 * time.Second} {
		id := []string{"short", "long"}[i]
		p.held.Store(true)
		time.AfterFunc(hold, func() { p.held.Store(false) })
		_, err := s.rep.RunCreate(ctx, &store.RunCreateParams{Namespace: "default", ID: id, WorkflowID: id, Workflow: "wf", Queue: "default"})
		t.Logf("append held %s: %v", hold, err)
		if err != nil && !errors.Is(err, errUnknownOutcome) {
			t.Fatalf("append held %s: %v, want success or an unknown outcome", hold, err)
		}
		for p.held.Load() {
			time.Sleep(10 * time.Millisecond)
		}
		if n := countLogged(t, srv.ClientURL(), id); n > 1 || (err == nil && n != 1) {
			t.Fatalf("run %s is in the log %d times after an append that returned %v", id, n, err)
		}
	}
	// Whatever the outcome, a replica rebuilt from the log matches.
	s.Close()
	os.Remove(filepath.Join(dir, "a.db"))
	r := openStore(t, Config{Conn: connectTo(t, srv), Replica: filepath.Join(dir, "b.db"), LeaseDuration: time.Hour})
	for _, id := range []string{"short", "long"} {
		_, err := r.rep.RunGet(ctx, &store.RunGetParams{Namespace: "default", Ref: id})
		if logged := countLogged(t, srv.ClientURL(), id) == 1; logged != (err == nil) {
			t.Errorf("run %s: logged %v, in the rebuilt replica: %v", id, logged, err)
		}
	}
}

// countLogged counts the records of the default cluster's log that insert
// run id.
func countLogged(t *testing.T, url, id string) int {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	l, err := openLog(context.Background(), js, "default", 1, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	last, _ := l.last(context.Background())
	r, err := l.readFrom(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	defer r.stop()
	n := 0
	for {
		e, err := r.nextRecord(context.Background(), last)
		if errors.Is(err, errTail) {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		rec, err := decodeRecord(e.data)
		if err != nil {
			t.Fatal(err)
		}
		for _, st := range rec.batch.Statements {
			if strings.HasPrefix(st.Query, "INSERT INTO runs") && len(st.Args) > 1 && st.Args[1] == id {
				n++
			}
		}
	}
}

func TestCorruptRecordRefusedAtOpen(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := openStore(t, Config{Dir: dir})
	waitLeading(t, s)
	for _, id := range []string{"r-aaaa", "r-bbbb", "r-cccc", "r-dddd"} {
		if err := createRun(ctx, view(s), id); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	// Alter one record in the middle of the log, offline: the run ID of its
	// second batch, in the stream's block file.
	blocks, _ := filepath.Glob(filepath.Join(dir, "nats", "jetstream", "*", "streams", "TRELLIS_default", "msgs", "*.blk"))
	if len(blocks) == 0 {
		t.Fatal("no block file of the log")
	}
	data, err := os.ReadFile(blocks[0])
	if err != nil {
		t.Fatal(err)
	}
	i := bytes.Index(data, []byte("r-bbbb"))
	if i < 0 {
		t.Fatal("record not found in the block file")
	}
	data[i+2] = 'x'
	if err := os.WriteFile(blocks[0], data, 0o600); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(dir, "replica.db"))
	_, err = Open(ctx, Config{Dir: dir})
	if err == nil {
		t.Fatal("a replica was rebuilt from a log with an altered record")
	}
	t.Logf("open after corruption: %v", err)
	if !strings.Contains(err.Error(), "log") {
		t.Errorf("error %q does not say the log is at fault", err)
	}
}

func TestEmbeddedServerSyncsEveryWrite(t *testing.T) {
	for durability, want := range map[string]bool{"": true, DurabilityFsync: true, DurabilityRelaxed: false} {
		s := openStore(t, Config{Dir: t.TempDir(), Durability: durability})
		if got := s.srv.JetStreamConfig().SyncAlways; got != want {
			t.Errorf("durability %q: sync_always %v, want %v", durability, got, want)
		}
	}
}

// A server whose lease's epoch is not above the log's (its replica lagged
// when it took the lease, or it was taken from it while it caught up) does
// not write: a record of a lower epoch after a higher one would be refused
// by every replica. A process test met it: a lagging follower took epoch 4
// after epoch 5 was written, and its epoch record stopped every replica.
func TestLeaseOfAnEpochTheLogHoldsDoesNotWrite(t *testing.T) {
	ctx := context.Background()
	a, b := writerAndFollower(t, func(a *Store) {
		if err := createRun(ctx, view(a), "before"); err != nil {
			t.Fatal(err)
		}
	})
	waitApplied(t, b, a.appliedSeq(), 10*time.Second)
	last, err := b.jl.last(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.mu.Lock()
	logEpoch := b.epoch
	b.mu.Unlock()
	for _, epoch := range []uint64{logEpoch - 1, logEpoch} {
		if err := b.lead(ctx, epoch); !errors.Is(err, errStaleEpoch) {
			t.Fatalf("leading in epoch %d of a log at epoch %d: %v, want errStaleEpoch", epoch, logEpoch, err)
		}
	}
	if after, err := b.jl.last(ctx); err != nil || after != last {
		t.Fatalf("the log ends at %d after the refused takeovers (%v), was %d", after, err, last)
	}
	if b.Leading() {
		t.Fatal("the store leads after a refused takeover")
	}
	if err := createRun(ctx, view(a), "after"); err != nil {
		t.Fatalf("the writer's next batch: %v", err)
	}
}

// A follower's subscribers are woken by the writer's commits: the topics
// travel in the log's records and each server signals them as it applies
// one. Both ways: a run created on the writer wakes the follower's "ready"
// subscriber, and a run created through the follower (forwarded) wakes the
// writer's.
func TestFollowerSignalsTheWritersCommits(t *testing.T) {
	ctx := context.Background()
	a, b := writerAndFollower(t, nil)
	for i, c := range []struct {
		name        string
		writer, sub *Store
	}{{"the writer's commit on the follower", a, b}, {"a forwarded write on the writer", b, a}} {
		ch, unsub, err := c.sub.Subscribe(ctx, store.TopicReady)
		if err != nil {
			t.Fatal(err)
		}
		select { // a signal from before the write does not count
		case <-ch:
		default:
		}
		if err := createRun(ctx, view(c.writer), fmt.Sprint("wake-", i)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no %q signal within 5s", c.name, store.TopicReady)
		}
		unsub()
	}
}
