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
}

func (s *queues) QueueGet(_ context.Context, p *store.QueueGetParams) (*store.Queue, error) {
	s.reads.Add(1)
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
