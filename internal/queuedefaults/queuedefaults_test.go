package queuedefaults

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// queues is a QueueStore of one queue record, counting the reads.
type queues struct {
	store.QueueStore
	mu    sync.Mutex
	retry *store.QueueRetry
	reads atomic.Int32
	fail  error
	gate  chan struct{} // when set, a read waits for it (or for its context)
}

func (s *queues) QueueGet(ctx context.Context, p *store.QueueGetParams) (*store.Queue, error) {
	s.reads.Add(1)
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail != nil {
		return nil, s.fail
	}
	if p.Name != "q" {
		return nil, store.ErrQueueNotFound
	}
	return &store.Queue{Namespace: p.Namespace, Name: p.Name, Retry: s.retry}, nil
}

func (s *queues) set(r *store.QueueRetry, fail error) {
	s.mu.Lock()
	s.retry, s.fail = r, fail
	s.mu.Unlock()
}

// The cache reads a queue's record once per TTL, serves what it knows while
// one caller reads it again, keeps what it knew when a read is cut short,
// forgets a queue on demand, and fills only runs no server filled.
func TestCache(t *testing.T) {
	st := &queues{retry: &store.QueueRetry{MaxAttempts: 4}}
	c := New(st, slog.New(slog.DiscardHandler))
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	c.now = func() time.Time { return now }
	ctx := context.Background()
	for range 10 {
		if r := c.Retry(ctx, "ns", "q"); r == nil || r.MaxAttempts != 4 {
			t.Fatalf("Retry = %+v", r)
		}
	}
	if n := st.reads.Load(); n != 1 {
		t.Fatalf("%d reads within the TTL, want 1", n)
	}
	if r := c.Retry(ctx, "ns", "other"); r != nil {
		t.Fatalf("a queue without a record: %+v", r)
	}
	st.set(&store.QueueRetry{MaxAttempts: 2}, nil)
	if r := c.Retry(ctx, "ns", "q"); r.MaxAttempts != 4 {
		t.Fatalf("changed within the TTL: %+v", r)
	}
	now = now.Add(TTL + time.Second)
	if r := c.Retry(ctx, "ns", "q"); r.MaxAttempts != 2 {
		t.Fatalf("after the TTL: %+v", r)
	}
	st.set(&store.QueueRetry{MaxAttempts: 7}, nil)
	c.Forget("ns", "q")
	if r := c.Retry(ctx, "ns", "q"); r.MaxAttempts != 7 {
		t.Fatalf("after Forget: %+v", r)
	}
	// A failing store: the SDK's defaults (nil) until it answers again.
	st.set(nil, errors.New("disk on fire"))
	now = now.Add(TTL + time.Second)
	if r := c.Retry(ctx, "ns", "q"); r != nil {
		t.Fatalf("store failing: %+v", r)
	}
	cr := &store.ClaimedRun{Run: &store.Run{Namespace: "ns", Queue: "q"}, QueueRetry: &store.QueueRetry{MaxAttempts: 9}}
	c.Fill(ctx, cr)
	if cr.QueueRetry.MaxAttempts != 9 {
		t.Fatal("Fill replaced what a server had set")
	}
	var nilCache *Cache
	nilCache.Fill(ctx, &store.ClaimedRun{Run: &store.Run{}})
}

// The runs of a claim that ask for a queue nothing is known of yet wait for one
// read of its record and all get its policy; when that read is cut short, one
// of them reads again.
func TestCacheReadsAQueueOnceForConcurrentRuns(t *testing.T) {
	st := &queues{retry: &store.QueueRetry{MaxAttempts: 3}, gate: make(chan struct{})}
	c := New(st, slog.New(slog.DiscardHandler))
	ctx := context.Background()

	// The first read is cut short (its caller's context ends): the waiters go on.
	cctx, cancel := context.WithCancel(ctx)
	firstDone := make(chan *store.QueueRetry)
	go func() { firstDone <- c.Retry(cctx, "ns", "q") }()
	for st.reads.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	const runs = 50
	var wg sync.WaitGroup
	got := make([]*store.QueueRetry, runs)
	for i := range runs {
		wg.Go(func() { got[i] = c.Retry(ctx, "ns", "q") })
	}
	time.Sleep(20 * time.Millisecond) // let them queue behind the first read
	cancel()
	if r := <-firstDone; r != nil {
		t.Fatalf("the cut-short read returned %+v", r)
	}
	for st.reads.Load() < 2 { // a waiter reads again
		time.Sleep(time.Millisecond)
	}
	close(st.gate)
	wg.Wait()
	for i, r := range got {
		if r == nil || r.MaxAttempts != 3 {
			t.Fatalf("run %d got %+v, want the queue's policy", i, r)
		}
	}
	if n := st.reads.Load(); n != 2 {
		t.Fatalf("%d reads for %d concurrent runs and one cut-short read, want 2", n, runs)
	}
}
