package trellis

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// The embedded backend's namespaces and queues: their records on the store,
// and the cache of them that starts and events apply.

func (e *embedded) createNamespace(ctx context.Context, o NamespaceOptions) (*Namespace, error) {
	return e.store.NamespaceCreate(ctx, &o)
}

func (e *embedded) getNamespace(ctx context.Context, name string) (*Namespace, error) {
	return e.store.NamespaceGet(ctx, &store.NamespaceGetParams{Name: name})
}

func (e *embedded) listNamespaces(ctx context.Context) ([]*Namespace, error) {
	return e.store.NamespaceList(ctx)
}

func (e *embedded) updateNamespace(ctx context.Context, u NamespaceUpdate) (*Namespace, error) {
	ns, err := e.store.NamespaceUpdate(ctx, &u)
	if err == nil {
		e.objects.forget([2]string{u.Name, ""}) // this client's next start applies the change
	}
	return ns, err
}

func (e *embedded) createQueue(ctx context.Context, name string, s QueueSettings) (*Queue, error) {
	q, err := e.store.QueueCreate(ctx, &store.QueueCreateParams{Namespace: e.cfg.Namespace, Name: name, QueueSettings: s})
	e.forgetQueue(name)
	return q, err
}

func (e *embedded) getQueue(ctx context.Context, name string) (*Queue, error) {
	return e.store.QueueGet(ctx, &store.QueueGetParams{Namespace: e.cfg.Namespace, Name: name})
}

func (e *embedded) listQueues(ctx context.Context) ([]*Queue, error) {
	return e.store.QueueList(ctx, &store.QueueListParams{Namespace: e.cfg.Namespace})
}

func (e *embedded) updateQueue(ctx context.Context, name string, s QueueSettings) (*Queue, error) {
	q, err := e.store.QueueUpdate(ctx, &store.QueueUpdateParams{Namespace: e.cfg.Namespace, Name: name, QueueSettings: s,
		Idempotency: e.idempotency("sameRecord")})
	e.forgetQueue(name)
	return q, err
}

func (e *embedded) setQueuePaused(ctx context.Context, name string, paused bool) (*Queue, error) {
	return e.store.QueueSetPaused(ctx, &store.QueueSetPausedParams{Namespace: e.cfg.Namespace, Name: name, Paused: paused,
		Idempotency: e.idempotency("sameRecord")})
}

// namespaceQueue is the default queue of the client's namespace: its record's,
// else "default".
func (e *embedded) namespaceQueue(ctx context.Context) (string, error) {
	nsE, err := e.namespaceRecord(ctx, e.cfg.Namespace)
	if err != nil {
		return "", opErr(fmt.Sprintf("getting namespace %q", e.cfg.Namespace), err)
	}
	if nsE.ns != nil && nsE.ns.DefaultQueue != "" {
		return nsE.ns.DefaultQueue, nil
	}
	return store.DefaultQueueName, nil
}

// objectTTL is how long a client keeps a namespace's or queue's record to apply to
// the runs it starts: a change takes effect for other clients within it.
const objectTTL = time.Second

// objectCache keeps the namespace and queue records a client's starts apply (nil:
// no record), each for objectTTL.
// Concurrent lookups of a key that is not fresh share one read: every start
// looks its records up, and a burst of starts at the moment they expire (w1 at
// n = 20,000 on Postgres) read the same record thousands of times a second.
type objectCache struct {
	mu      sync.Mutex
	entries map[[2]string]objectEntry   // {namespace, ""} or {namespace, queue}
	flights map[[2]string]*objectFlight // the reads under way
}

// objectFlight is a read of a record under way; e and err are set before done
// is closed.
type objectFlight struct {
	done chan struct{}
	e    objectEntry
	err  error
}

type objectEntry struct {
	ns       *store.Namespace
	q        *store.Queue
	minLimit int // {namespace, queueLimits}: the lowest payload limit of its queues (0: none)
	fetched  time.Time
}

// queueLimits is the objectCache key (with a namespace) of the lowest payload
// limit of the namespace's queues: no queue name has a NUL.
const queueLimits = "\x00limits"

// eventLimit refuses an event of n bytes above the payload limit of its run's
// queue (ErrPayloadTooLarge). It reads the run only when some queue of the
// namespace has a limit below n (known from a cached list of its queues).
func (e *embedded) eventLimit(ctx context.Context, ref, name string, n int) error {
	lim, err := e.objects.lookup(ctx, [2]string{e.cfg.Namespace, queueLimits}, func() (objectEntry, error) {
		qs, err := e.store.QueueList(ctx, &store.QueueListParams{Namespace: e.cfg.Namespace})
		if errors.Is(err, store.ErrNamespaceNotFound) {
			return objectEntry{}, nil // no record: no queue records either
		}
		if err != nil {
			return objectEntry{}, err
		}
		var lim objectEntry
		for _, q := range qs {
			if q.PayloadLimit > 0 && (lim.minLimit == 0 || q.PayloadLimit < lim.minLimit) {
				lim.minLimit = q.PayloadLimit
			}
		}
		return lim, nil
	})
	if err != nil || lim.minLimit == 0 || n <= lim.minLimit {
		return err
	}
	run, err := e.store.RunGet(ctx, &store.RunGetParams{Namespace: e.cfg.Namespace, Ref: ref, OmitLarge: true})
	if err != nil {
		return err
	}
	qE, err := e.objects.lookup(ctx, [2]string{e.cfg.Namespace, run.Queue}, func() (objectEntry, error) {
		q, err := e.store.QueueGet(ctx, &store.QueueGetParams{Namespace: e.cfg.Namespace, Name: run.Queue})
		if errors.Is(err, store.ErrQueueNotFound) {
			return objectEntry{}, nil
		}
		return objectEntry{q: q}, err
	})
	if err != nil || qE.q == nil {
		return err
	}
	if l := qE.q.PayloadLimit; l > 0 && n > l {
		return fmt.Errorf("%w: event %q is %d bytes (queue %q limit %d)", ErrPayloadTooLarge, name, n, run.Queue, l)
	}
	return nil
}

// forget drops key's record: the next lookup reads it again, and does not wait
// for a read under way, which may have begun before the change.
func (oc *objectCache) forget(key [2]string) {
	oc.mu.Lock()
	delete(oc.entries, key)
	delete(oc.flights, key)
	oc.mu.Unlock()
}

// lookup returns the record of key, reading it with read when it is not fresh.
// A lookup that finds a read of key under way waits for it instead; if that read
// fails (its caller's context may have ended), it reads for itself.
func (oc *objectCache) lookup(ctx context.Context, key [2]string, read func() (objectEntry, error)) (objectEntry, error) {
	now := time.Now()
	oc.mu.Lock()
	e, ok := oc.entries[key]
	if ok && now.Sub(e.fetched) < objectTTL {
		oc.mu.Unlock()
		return e, nil
	}
	if f := oc.flights[key]; f != nil {
		oc.mu.Unlock()
		select {
		case <-f.done:
			if f.err == nil {
				return f.e, nil
			}
		case <-ctx.Done():
			return objectEntry{}, ctx.Err()
		}
		return oc.read(key, now, nil, read)
	}
	f := &objectFlight{done: make(chan struct{})}
	if oc.flights == nil {
		oc.flights = map[[2]string]*objectFlight{}
	}
	oc.flights[key] = f
	oc.mu.Unlock()
	return oc.read(key, now, f, read)
}

// read reads key's record and keeps it, unless f (the read's flight, nil for
// none) was forgotten meanwhile; it hands the outcome to f's waiters.
func (oc *objectCache) read(key [2]string, now time.Time, f *objectFlight, read func() (objectEntry, error)) (objectEntry, error) {
	e, err := read()
	e.fetched = now
	oc.mu.Lock()
	current := f == nil || oc.flights[key] == f
	if f != nil && current {
		delete(oc.flights, key)
	}
	if err == nil && current {
		if oc.entries == nil {
			oc.entries = map[[2]string]objectEntry{}
		}
		oc.entries[key] = e
	}
	oc.mu.Unlock()
	if f != nil {
		f.e, f.err = e, err
		close(f.done)
	}
	return e, err
}

// applyRecords applies the records of the run's namespace and queue to a start:
// the namespace's default queue (when neither the start nor the workflow names
// one), the queue's priority (when the start gives none), and both payload limits
// (ErrPayloadTooLarge). Without records a start is as before.
func (e *embedded) applyRecords(ctx context.Context, def *definition, o StartOptions, p *store.RunCreateParams) error {
	nsE, err := e.namespaceRecord(ctx, p.Namespace)
	if err != nil || nsE.ns == nil {
		return err // no namespace record: no queue record either
	}
	if o.Queue == "" && def.opts.Queue == "" {
		p.Queue = nsE.ns.DefaultQueue
	}
	if l := nsE.ns.PayloadLimit; l > 0 && len(p.Input) > l {
		return fmt.Errorf("%w: input is %d bytes (namespace %q limit %d)", ErrPayloadTooLarge, len(p.Input), p.Namespace, l)
	}
	qE, err := e.objects.lookup(ctx, [2]string{p.Namespace, p.Queue}, func() (objectEntry, error) {
		q, err := e.store.QueueGet(ctx, &store.QueueGetParams{Namespace: p.Namespace, Name: p.Queue})
		if errors.Is(err, store.ErrQueueNotFound) {
			return objectEntry{}, nil
		}
		return objectEntry{q: q}, err
	})
	if err != nil || qE.q == nil {
		return err
	}
	if l := qE.q.PayloadLimit; l > 0 && len(p.Input) > l {
		return fmt.Errorf("%w: input is %d bytes (queue %q limit %d)", ErrPayloadTooLarge, len(p.Input), p.Queue, l)
	}
	if o.Priority == 0 {
		p.Priority = qE.q.Priority
	}
	return nil
}

// namespaceRecord returns namespace ns's record, from the cache when it is fresh
// (nil ns: no record).
func (e *embedded) namespaceRecord(ctx context.Context, ns string) (objectEntry, error) {
	return e.objects.lookup(ctx, [2]string{ns, ""}, func() (objectEntry, error) {
		rec, err := e.store.NamespaceGet(ctx, &store.NamespaceGetParams{Name: ns})
		if errors.Is(err, store.ErrNamespaceNotFound) {
			return objectEntry{}, nil
		}
		return objectEntry{ns: rec}, err
	})
}

// forgetQueue makes this client read queue name's record again for its next
// start and its worker's next run: a change made through the client applies at
// once.
func (e *embedded) forgetQueue(name string) {
	e.objects.forget([2]string{e.cfg.Namespace, name})
	e.objects.forget([2]string{e.cfg.Namespace, queueLimits})
	if e.queues != nil {
		e.queues.Forget(e.cfg.Namespace, name)
	}
}
