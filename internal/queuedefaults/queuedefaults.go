// Package queuedefaults caches the default step retry policies of queues
// (store.Queue.Retry), and their payload limits, for the runs a worker executes, so that a run's steps
// without a retry policy of their own take their queue's: one read of a queue's
// record per TTL, whatever the number of runs. The client fills the runs its
// worker claims; a server fills the runs it pushes to remote workers.
package queuedefaults

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// TTL is how long a queue's default retry policy is used before
// its record is read again: a change made elsewhere reaches this process's
// runs within it (one made through this client at once).
const TTL = 5 * time.Second

// Cache holds queues' default retry policies. A nil *Cache fills nothing.
type Cache struct {
	st  store.QueueStore
	log *slog.Logger
	now func() time.Time

	mu      sync.Mutex
	entries map[[2]string]entry
}

type entry struct {
	retry *store.QueueRetry // nil: no record, or no policy
	limit int               // the queue's payload limit; 0: none
	until time.Time
	first *flight // the first read of the queue, while it is in flight
}

// flight is a first read of a queue's record, which the callers that come
// meanwhile wait for: a claim hands a worker hundreds of runs of one queue at
// once, and each would otherwise read the record itself (a thousand reads for
// w5's first claim), while none may go on without its queue's policy.
type flight struct {
	done  chan struct{} // closed when the read is over
	retry *store.QueueRetry
	limit int
	ok    bool // the read answered (the record, or none); false: cut short
}

// New returns a cache over st.
func New(st store.QueueStore, log *slog.Logger) *Cache {
	return &Cache{st: st, log: log, now: time.Now, entries: make(map[[2]string]entry)}
}

// Retry returns the default retry policy of queue in namespace ns; nil when the
// queue has none or its record cannot be read (the SDK's defaults then apply).
func (q *Cache) Retry(ctx context.Context, ns, queue string) *store.QueueRetry {
	r, _ := q.Defaults(ctx, ns, queue)
	return r
}

// Defaults returns the default retry policy and the payload limit (0: none)
// of queue in namespace ns, as Retry does.
func (q *Cache) Defaults(ctx context.Context, ns, queue string) (*store.QueueRetry, int) {
	key := [2]string{ns, queue}
	now := q.now()
	q.mu.Lock()
	e, ok := q.entries[key]
	var first *flight
	switch {
	case ok && e.first != nil:
		q.mu.Unlock()
		select {
		case <-e.first.done:
		case <-ctx.Done():
			return nil, 0
		}
		if e.first.ok {
			return e.first.retry, e.first.limit
		}
		return q.Defaults(ctx, ns, queue) // that read was cut short: read again
	case ok && now.Before(e.until):
		q.mu.Unlock()
		return e.retry, e.limit
	case ok:
		// Expired: this caller reads the record again; the others go on with
		// what is known until it has, rather than all reading at once.
		q.entries[key] = entry{retry: e.retry, limit: e.limit, until: now.Add(TTL)}
	default:
		first = &flight{done: make(chan struct{})}
		q.entries[key] = entry{first: first}
		defer close(first.done)
	}
	q.mu.Unlock()
	rec, err := q.st.QueueGet(ctx, &store.QueueGetParams{Namespace: ns, Name: queue})
	switch {
	case err == nil:
		e.retry, e.limit = rec.Retry, rec.PayloadLimit
	case ctx.Err() != nil:
		if first != nil { // nothing known yet: the next caller reads
			q.mu.Lock()
			if cur := q.entries[key]; cur.first == first {
				delete(q.entries, key)
			}
			q.mu.Unlock()
		}
		return e.retry, e.limit // keep what was known
	default: // no record (ErrQueueNotFound), or the store failed: the SDK's defaults
		e.retry, e.limit = nil, 0
		if !errors.Is(err, store.ErrQueueNotFound) {
			q.log.Warn("reading the queue's default retry policy", "namespace", ns, "queue", queue, "err", err)
		}
	}
	e.until, e.first = now.Add(TTL), nil
	q.mu.Lock()
	q.entries[key] = e
	q.mu.Unlock()
	if first != nil {
		first.retry, first.limit, first.ok = e.retry, e.limit, true
	}
	return e.retry, e.limit
}

// Forget drops what is known of a queue (changed through this client).
func (q *Cache) Forget(ns, queue string) {
	q.mu.Lock()
	delete(q.entries, [2]string{ns, queue})
	q.mu.Unlock()
}

// Fill sets cr.QueueRetry and cr.PayloadLimit from the run's queue, unless a
// server has set them.
func (q *Cache) Fill(ctx context.Context, cr *store.ClaimedRun) {
	if q == nil || cr.QueueRetry != nil || cr.PayloadLimit != 0 {
		return
	}
	cr.QueueRetry, cr.PayloadLimit = q.Defaults(ctx, cr.Run.Namespace, cr.Run.Queue)
}
