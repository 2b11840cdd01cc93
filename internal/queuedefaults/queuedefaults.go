// Package queuedefaults caches the default step retry policies of queues
// (store.Queue.Retry) for the runs a worker executes, so that a run's steps
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
	until time.Time
}

// New returns a cache over st.
func New(st store.QueueStore, log *slog.Logger) *Cache {
	return &Cache{st: st, log: log, now: time.Now, entries: make(map[[2]string]entry)}
}

// Retry returns the default retry policy of queue in namespace ns; nil when the
// queue has none or its record cannot be read (the SDK's defaults then apply).
func (q *Cache) Retry(ctx context.Context, ns, queue string) *store.QueueRetry {
	key := [2]string{ns, queue}
	now := q.now()
	q.mu.Lock()
	e, ok := q.entries[key]
	if ok && now.Before(e.until) {
		q.mu.Unlock()
		return e.retry
	}
	if ok {
		// Expired: this caller reads the record again; the others go on with
		// what is known until it has, rather than all reading at once.
		q.entries[key] = entry{retry: e.retry, until: now.Add(TTL)}
	}
	q.mu.Unlock()
	rec, err := q.st.QueueGet(ctx, &store.QueueGetParams{Namespace: ns, Name: queue})
	switch {
	case err == nil:
		e.retry = rec.Retry
	case ctx.Err() != nil:
		return e.retry // keep what was known
	default: // no record (ErrQueueNotFound), or the store failed: the SDK's defaults
		e.retry = nil
		if !errors.Is(err, store.ErrQueueNotFound) {
			q.log.Warn("reading the queue's default retry policy", "namespace", ns, "queue", queue, "err", err)
		}
	}
	e.until = now.Add(TTL)
	q.mu.Lock()
	q.entries[key] = e
	q.mu.Unlock()
	return e.retry
}

// Forget drops what is known of a queue (changed through this client).
func (q *Cache) Forget(ns, queue string) {
	q.mu.Lock()
	delete(q.entries, [2]string{ns, queue})
	q.mu.Unlock()
}

// Fill sets cr.QueueRetry from the run's queue, unless a server has set it.
func (q *Cache) Fill(ctx context.Context, cr *store.ClaimedRun) {
	if q == nil || cr.QueueRetry != nil {
		return
	}
	cr.QueueRetry = q.Retry(ctx, cr.Run.Namespace, cr.Run.Queue)
}
