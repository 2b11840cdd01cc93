package trellis

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/trellis-dev/trellis/internal/httpc"
	"github.com/trellis-dev/trellis/store"
)

// Namespaces and queues as objects (docs/queues.md). A namespace or queue without a
// record behaves with the implicit defaults: runs can be started in any namespace
// and queue. A record sets a namespace's retention, default queue and payload limit,
// and a queue's limits, enforced where runs are claimed across every worker: paused,
// a concurrency limit, a per-concurrency-key limit (StartOptions.ConcurrencyKey) and
// a rate limit.

type (
	// Namespace is a namespace's record.
	Namespace = store.Namespace
	// NamespaceOptions are the fields of a new namespace; zero fields take the
	// defaults (retention 30 days, default queue "default", no payload limit).
	NamespaceOptions = store.NamespaceCreateParams
	// NamespaceUpdate changes the non-nil fields of a namespace.
	NamespaceUpdate = store.NamespaceUpdateParams
	// Queue is a queue's record.
	Queue = store.Queue
	// QueueSettings are a queue's limits and defaults; nil fields are left as they
	// are (on create: none). Every limit must be positive.
	QueueSettings = store.QueueSettings
	// QueueRetry is a queue's default retry policy.
	QueueRetry = store.QueueRetry
	// Duration is a duration that reads and writes JSON as "720h0m0s".
	Duration = store.Duration
)

// CreateNamespace creates a namespace's record. ErrNamespaceExists when it has one.
func (c *Client) CreateNamespace(ctx context.Context, o NamespaceOptions) (*Namespace, error) {
	return callV(ctx, c, ClientCall{Method: "CreateNamespace", Ref: o.Name}, func(ctx context.Context) (*Namespace, error) { return c.doCreateNamespace(ctx, o) })
}

// doCreateNamespace is CreateNamespace without the call interceptors.
func (c *Client) doCreateNamespace(ctx context.Context, o NamespaceOptions) (*Namespace, error) {
	var ns *Namespace
	var err error
	if c.remote != nil {
		ns = new(Namespace)
		err = c.remote.call(ctx, http.MethodPost, "/v1/namespaces", o, ns)
	} else {
		ns, err = c.store.NamespaceCreate(ctx, &o)
	}
	if err != nil {
		return nil, opErr(fmt.Sprintf("creating namespace %q", o.Name), err)
	}
	return ns, nil
}

// GetNamespace returns a namespace's record. ErrNamespaceNotFound without one.
func (c *Client) GetNamespace(ctx context.Context, name string) (*Namespace, error) {
	return callV(ctx, c, ClientCall{Method: "GetNamespace", Ref: name}, func(ctx context.Context) (*Namespace, error) { return c.doGetNamespace(ctx, name) })
}

// doGetNamespace is GetNamespace without the call interceptors.
func (c *Client) doGetNamespace(ctx context.Context, name string) (*Namespace, error) {
	var ns *Namespace
	var err error
	if c.remote != nil {
		ns = new(Namespace)
		err = c.remote.call(ctx, http.MethodGet, nsPath(name), nil, ns)
	} else {
		ns, err = c.store.NamespaceGet(ctx, &store.NamespaceGetParams{Name: name})
	}
	if err != nil {
		return nil, opErr(fmt.Sprintf("getting namespace %q", name), err)
	}
	return ns, nil
}

// ListNamespaces lists the namespaces' records by name.
func (c *Client) ListNamespaces(ctx context.Context) ([]*Namespace, error) {
	return callV(ctx, c, ClientCall{Method: "ListNamespaces"}, c.doListNamespaces)
}

// doListNamespaces is ListNamespaces without the call interceptors.
func (c *Client) doListNamespaces(ctx context.Context) ([]*Namespace, error) {
	var out []*Namespace
	var err error
	if c.remote != nil {
		var l struct {
			Namespaces []*Namespace `json:"namespaces"`
		}
		err = c.remote.call(ctx, http.MethodGet, "/v1/namespaces", nil, &l)
		out = l.Namespaces
	} else {
		out, err = c.store.NamespaceList(ctx)
	}
	if err != nil {
		return nil, opErr("listing namespaces", err)
	}
	return out, nil
}

// UpdateNamespace changes the non-nil fields of a namespace's record.
func (c *Client) UpdateNamespace(ctx context.Context, u NamespaceUpdate) (*Namespace, error) {
	return callV(ctx, c, ClientCall{Method: "UpdateNamespace", Ref: u.Name}, func(ctx context.Context) (*Namespace, error) { return c.doUpdateNamespace(ctx, u) })
}

// doUpdateNamespace is UpdateNamespace without the call interceptors.
func (c *Client) doUpdateNamespace(ctx context.Context, u NamespaceUpdate) (*Namespace, error) {
	var ns *Namespace
	var err error
	if c.remote != nil {
		ns = new(Namespace)
		body := u
		body.Name = "" // the path names it
		err = c.remote.call(ctx, http.MethodPatch, nsPath(u.Name), body, ns)
	} else {
		ns, err = c.store.NamespaceUpdate(ctx, &u)
	}
	if err != nil {
		return nil, opErr(fmt.Sprintf("updating namespace %q", u.Name), err)
	}
	c.objects.forget([2]string{u.Name, ""}) // this client's next start applies the change
	return ns, nil
}

// CreateQueue creates the record of queue name in the client's namespace, which
// needs a record (ErrNamespaceNotFound). ErrQueueExists when it has one.
func (c *Client) CreateQueue(ctx context.Context, name string, s QueueSettings) (*Queue, error) {
	return callV(ctx, c, ClientCall{Method: "CreateQueue", Ref: name}, func(ctx context.Context) (*Queue, error) { return c.doCreateQueue(ctx, name, s) })
}

// doCreateQueue is CreateQueue without the call interceptors.
func (c *Client) doCreateQueue(ctx context.Context, name string, s QueueSettings) (*Queue, error) {
	p := store.QueueCreateParams{Namespace: c.cfg.Namespace, Name: name, QueueSettings: s}
	var q *Queue
	var err error
	if c.remote != nil {
		q = new(Queue)
		body := struct {
			Name string `json:"name"`
			QueueSettings
		}{name, s}
		err = c.remote.call(ctx, http.MethodPost, c.remote.ns+"/queues", body, q)
	} else {
		q, err = c.store.QueueCreate(ctx, &p)
		c.forgetQueue(name)
	}
	if err != nil {
		return nil, opErr(fmt.Sprintf("creating queue %q", name), err)
	}
	return q, nil
}

// GetQueue returns the record of queue name of the client's namespace.
// ErrQueueNotFound without one.
func (c *Client) GetQueue(ctx context.Context, name string) (*Queue, error) {
	return callV(ctx, c, ClientCall{Method: "GetQueue", Ref: name}, func(ctx context.Context) (*Queue, error) { return c.doGetQueue(ctx, name) })
}

// doGetQueue is GetQueue without the call interceptors.
func (c *Client) doGetQueue(ctx context.Context, name string) (*Queue, error) {
	var q *Queue
	var err error
	if c.remote != nil {
		q = new(Queue)
		err = c.remote.call(ctx, http.MethodGet, c.remote.queuePath(name), nil, q)
	} else {
		q, err = c.store.QueueGet(ctx, &store.QueueGetParams{Namespace: c.cfg.Namespace, Name: name})
	}
	if err != nil {
		return nil, opErr(fmt.Sprintf("getting queue %q", name), err)
	}
	return q, nil
}

// ListQueues lists the queue records of the client's namespace by name.
func (c *Client) ListQueues(ctx context.Context) ([]*Queue, error) {
	return callV(ctx, c, ClientCall{Method: "ListQueues"}, c.doListQueues)
}

// doListQueues is ListQueues without the call interceptors.
func (c *Client) doListQueues(ctx context.Context) ([]*Queue, error) {
	var out []*Queue
	var err error
	if c.remote != nil {
		var l struct {
			Queues []*Queue `json:"queues"`
		}
		err = c.remote.call(ctx, http.MethodGet, c.remote.ns+"/queues", nil, &l)
		out = l.Queues
	} else {
		out, err = c.store.QueueList(ctx, &store.QueueListParams{Namespace: c.cfg.Namespace})
	}
	if err != nil {
		return nil, opErr("listing queues", err)
	}
	return out, nil
}

// UpdateQueue changes the non-nil settings of queue name of the client's namespace.
func (c *Client) UpdateQueue(ctx context.Context, name string, s QueueSettings) (*Queue, error) {
	return callV(ctx, c, ClientCall{Method: "UpdateQueue", Ref: name}, func(ctx context.Context) (*Queue, error) { return c.doUpdateQueue(ctx, name, s) })
}

// doUpdateQueue is UpdateQueue without the call interceptors.
func (c *Client) doUpdateQueue(ctx context.Context, name string, s QueueSettings) (*Queue, error) {
	var q *Queue
	var err error
	if c.remote != nil {
		q = new(Queue)
		err = c.remote.call(ctx, http.MethodPatch, c.remote.queuePath(name), s, q)
	} else {
		q, err = c.store.QueueUpdate(ctx, &store.QueueUpdateParams{Namespace: c.cfg.Namespace, Name: name, QueueSettings: s,
			Idempotency: idempotency(ctx, sameRecord)})
		c.forgetQueue(name)
	}
	if err != nil {
		return nil, opErr(fmt.Sprintf("updating queue %q", name), err)
	}
	return q, nil
}

// PauseQueue pauses queue name of the client's namespace: it still accepts runs,
// nobody claims them until ResumeQueue, and the runs already running finish.
// ErrQueueState when it is paused already.
func (c *Client) PauseQueue(ctx context.Context, name string) (*Queue, error) {
	return callV(ctx, c, ClientCall{Method: "PauseQueue", Ref: name}, func(ctx context.Context) (*Queue, error) { return c.setPaused(ctx, name, true) })
}

// ResumeQueue resumes a paused queue. ErrQueueState when it is not paused.
func (c *Client) ResumeQueue(ctx context.Context, name string) (*Queue, error) {
	return callV(ctx, c, ClientCall{Method: "ResumeQueue", Ref: name}, func(ctx context.Context) (*Queue, error) { return c.setPaused(ctx, name, false) })
}

func (c *Client) setPaused(ctx context.Context, name string, paused bool) (*Queue, error) {
	verb := map[bool]string{true: "pause", false: "resume"}[paused]
	var q *Queue
	var err error
	if c.remote != nil {
		q = new(Queue)
		err = c.remote.call(ctx, http.MethodPost, c.remote.queuePath(name)+"/"+verb, nil, q)
	} else {
		q, err = c.store.QueueSetPaused(ctx, &store.QueueSetPausedParams{Namespace: c.cfg.Namespace, Name: name, Paused: paused,
			Idempotency: idempotency(ctx, sameRecord)})
	}
	if err != nil {
		return nil, opErr(fmt.Sprintf("%s queue %q", map[bool]string{true: "pausing", false: "resuming"}[paused], name), err)
	}
	return q, nil
}

// opErr wraps err, the failure of op (`getting queue "q"`), in op, once: an error
// that begins with op already (a server's answer to the same call) is returned as
// it is, and one that begins with op's words before its quoted name (the store's
// `getting queue: queue not found: ...`) has those words replaced by op, so that
// the message says what failed once, with the name. errors.Is sees through both.
func opErr(op string, err error) error {
	msg := err.Error()
	if strings.HasPrefix(msg, op+": ") {
		return err
	}
	if i := strings.IndexByte(op, '"'); i > 0 {
		if verb := strings.TrimSpace(op[:i]); strings.HasPrefix(msg, verb+": ") {
			return &opError{msg: op + msg[len(verb):], err: err}
		}
	}
	return fmt.Errorf("%s: %w", op, err)
}

// opError is an error whose message opErr rewrote.
type opError struct {
	msg string
	err error
}

func (e *opError) Error() string { return e.msg }
func (e *opError) Unwrap() error { return e.err }

func nsPath(name string) string { return "/v1/namespaces/" + url.PathEscape(name) }

func (r *remote) queuePath(name string) string { return r.ns + "/queues/" + url.PathEscape(name) }

// call makes a JSON call of the API: body (nil for none) in, out (nil for none) back.
func (r *remote) call(ctx context.Context, method, path string, body, out any) error {
	_, err := r.do(ctx, httpc.Call{Method: method, Path: path, Body: body, Out: out})
	return err
}

// objectTTL is how long a client keeps a namespace's or queue's record to apply to
// the runs it starts: a change takes effect for other clients within it.
const objectTTL = time.Second

// objectCache keeps the namespace and queue records a client's starts apply (nil:
// no record), each for objectTTL.
type objectCache struct {
	mu      sync.Mutex
	entries map[[2]string]objectEntry // {namespace, ""} or {namespace, queue}
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
func (c *Client) eventLimit(ctx context.Context, ref, name string, n int) error {
	e, err := c.objects.lookup([2]string{c.cfg.Namespace, queueLimits}, func() (objectEntry, error) {
		qs, err := c.store.QueueList(ctx, &store.QueueListParams{Namespace: c.cfg.Namespace})
		if errors.Is(err, store.ErrNamespaceNotFound) {
			return objectEntry{}, nil // no record: no queue records either
		}
		if err != nil {
			return objectEntry{}, err
		}
		var e objectEntry
		for _, q := range qs {
			if q.PayloadLimit > 0 && (e.minLimit == 0 || q.PayloadLimit < e.minLimit) {
				e.minLimit = q.PayloadLimit
			}
		}
		return e, nil
	})
	if err != nil || e.minLimit == 0 || n <= e.minLimit {
		return err
	}
	run, err := c.store.RunGet(ctx, &store.RunGetParams{Namespace: c.cfg.Namespace, Ref: ref, OmitLarge: true})
	if err != nil {
		return err
	}
	qE, err := c.objects.lookup([2]string{c.cfg.Namespace, run.Queue}, func() (objectEntry, error) {
		q, err := c.store.QueueGet(ctx, &store.QueueGetParams{Namespace: c.cfg.Namespace, Name: run.Queue})
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

// forget drops key's record: the next lookup reads it again.
func (oc *objectCache) forget(key [2]string) {
	oc.mu.Lock()
	delete(oc.entries, key)
	oc.mu.Unlock()
}

// lookup returns the record of key, reading it with read when it is not fresh.
func (oc *objectCache) lookup(key [2]string, read func() (objectEntry, error)) (objectEntry, error) {
	now := time.Now()
	oc.mu.Lock()
	e, ok := oc.entries[key]
	oc.mu.Unlock()
	if ok && now.Sub(e.fetched) < objectTTL {
		return e, nil
	}
	e, err := read()
	if err != nil {
		return e, err
	}
	e.fetched = now
	oc.mu.Lock()
	if oc.entries == nil {
		oc.entries = map[[2]string]objectEntry{}
	}
	oc.entries[key] = e
	oc.mu.Unlock()
	return e, nil
}

// applyRecords applies the records of the run's namespace and queue to a start:
// the namespace's default queue (when neither the start nor the workflow names
// one), the queue's priority (when the start gives none), and both payload limits
// (ErrPayloadTooLarge). Without records a start is as before.
func (c *Client) applyRecords(ctx context.Context, def *definition, o StartOptions, p *store.RunCreateParams) error {
	nsE, err := c.namespaceRecord(ctx, p.Namespace)
	if err != nil || nsE.ns == nil {
		return err // no namespace record: no queue record either
	}
	if o.Queue == "" && def.opts.Queue == "" {
		p.Queue = nsE.ns.DefaultQueue
	}
	if l := nsE.ns.PayloadLimit; l > 0 && len(p.Input) > l {
		return fmt.Errorf("%w: input is %d bytes (namespace %q limit %d)", ErrPayloadTooLarge, len(p.Input), p.Namespace, l)
	}
	qE, err := c.objects.lookup([2]string{p.Namespace, p.Queue}, func() (objectEntry, error) {
		q, err := c.store.QueueGet(ctx, &store.QueueGetParams{Namespace: p.Namespace, Name: p.Queue})
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
func (c *Client) namespaceRecord(ctx context.Context, ns string) (objectEntry, error) {
	return c.objects.lookup([2]string{ns, ""}, func() (objectEntry, error) {
		rec, err := c.store.NamespaceGet(ctx, &store.NamespaceGetParams{Name: ns})
		if errors.Is(err, store.ErrNamespaceNotFound) {
			return objectEntry{}, nil
		}
		return objectEntry{ns: rec}, err
	})
}

// StartQueue returns the queue a start of workflow with o would put its run in:
// o.Queue, else the queue this client registered the workflow with, else the
// default queue of the namespace's record, else "default". A server authorizes
// a start on this queue and then starts the run in it, so that a grant limited
// to one queue covers exactly the runs it lets the caller create.
//
// It is a lookup of the start's policy, not a call the interceptors see: the
// start it precedes is one.
func (c *Client) StartQueue(ctx context.Context, workflow string, o StartOptions) (string, error) {
	if o.Queue != "" {
		return o.Queue, nil
	}
	if def, ok := c.reg.get(workflow); ok && def.opts.Queue != "" {
		return def.opts.Queue, nil
	}
	return c.namespaceQueue(ctx)
}

// namespaceQueue is the default queue of the client's namespace: its record's,
// else "default".
func (c *Client) namespaceQueue(ctx context.Context) (string, error) {
	var def string
	if c.remote != nil {
		ns, err := c.doGetNamespace(ctx, c.cfg.Namespace)
		if err != nil && !errors.Is(err, ErrNamespaceNotFound) {
			return "", err
		}
		if ns != nil {
			def = ns.DefaultQueue
		}
	} else {
		nsE, err := c.namespaceRecord(ctx, c.cfg.Namespace)
		if err != nil {
			return "", opErr(fmt.Sprintf("getting namespace %q", c.cfg.Namespace), err)
		}
		if nsE.ns != nil {
			def = nsE.ns.DefaultQueue
		}
	}
	if def == "" {
		def = store.DefaultQueueName
	}
	return def, nil
}

// forgetQueue makes this client read queue name's record again for its next
// start and its worker's next run: a change made through the client applies at
// once.
func (c *Client) forgetQueue(name string) {
	c.objects.forget([2]string{c.cfg.Namespace, name})
	c.objects.forget([2]string{c.cfg.Namespace, queueLimits})
	if c.queues != nil {
		c.queues.Forget(c.cfg.Namespace, name)
	}
}
