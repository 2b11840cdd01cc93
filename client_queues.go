package trellis

import (
	"context"
	"fmt"
	"strings"

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
	return callV(ctx, c, ClientCall{Method: "CreateNamespace", Ref: o.Name}, func(ctx context.Context) (*Namespace, error) {
		ns, err := c.b.createNamespace(ctx, o)
		if err != nil {
			return nil, opErr(fmt.Sprintf("creating namespace %q", o.Name), err)
		}
		return ns, nil
	})
}

// GetNamespace returns a namespace's record. ErrNamespaceNotFound without one.
func (c *Client) GetNamespace(ctx context.Context, name string) (*Namespace, error) {
	return callV(ctx, c, ClientCall{Method: "GetNamespace", Ref: name}, func(ctx context.Context) (*Namespace, error) {
		ns, err := c.b.getNamespace(ctx, name)
		if err != nil {
			return nil, opErr(fmt.Sprintf("getting namespace %q", name), err)
		}
		return ns, nil
	})
}

// ListNamespaces lists the namespaces' records by name.
func (c *Client) ListNamespaces(ctx context.Context) ([]*Namespace, error) {
	return callV(ctx, c, ClientCall{Method: "ListNamespaces"}, func(ctx context.Context) ([]*Namespace, error) {
		out, err := c.b.listNamespaces(ctx)
		if err != nil {
			return nil, opErr("listing namespaces", err)
		}
		return out, nil
	})
}

// UpdateNamespace changes the non-nil fields of a namespace's record.
func (c *Client) UpdateNamespace(ctx context.Context, u NamespaceUpdate) (*Namespace, error) {
	return callV(ctx, c, ClientCall{Method: "UpdateNamespace", Ref: u.Name}, func(ctx context.Context) (*Namespace, error) {
		ns, err := c.b.updateNamespace(ctx, u)
		if err != nil {
			return nil, opErr(fmt.Sprintf("updating namespace %q", u.Name), err)
		}
		return ns, nil
	})
}

// CreateQueue creates the record of queue name in the client's namespace, which
// needs a record (ErrNamespaceNotFound). ErrQueueExists when it has one.
func (c *Client) CreateQueue(ctx context.Context, name string, s QueueSettings) (*Queue, error) {
	return callV(ctx, c, ClientCall{Method: "CreateQueue", Ref: name}, func(ctx context.Context) (*Queue, error) {
		q, err := c.b.createQueue(ctx, name, s)
		if err != nil {
			return nil, opErr(fmt.Sprintf("creating queue %q", name), err)
		}
		return q, nil
	})
}

// GetQueue returns the record of queue name of the client's namespace.
// ErrQueueNotFound without one.
func (c *Client) GetQueue(ctx context.Context, name string) (*Queue, error) {
	return callV(ctx, c, ClientCall{Method: "GetQueue", Ref: name}, func(ctx context.Context) (*Queue, error) {
		q, err := c.b.getQueue(ctx, name)
		if err != nil {
			return nil, opErr(fmt.Sprintf("getting queue %q", name), err)
		}
		return q, nil
	})
}

// ListQueues lists the queue records of the client's namespace by name.
func (c *Client) ListQueues(ctx context.Context) ([]*Queue, error) {
	return callV(ctx, c, ClientCall{Method: "ListQueues"}, func(ctx context.Context) ([]*Queue, error) {
		out, err := c.b.listQueues(ctx)
		if err != nil {
			return nil, opErr("listing queues", err)
		}
		return out, nil
	})
}

// UpdateQueue changes the non-nil settings of queue name of the client's namespace.
func (c *Client) UpdateQueue(ctx context.Context, name string, s QueueSettings) (*Queue, error) {
	return callV(ctx, c, ClientCall{Method: "UpdateQueue", Ref: name}, func(ctx context.Context) (*Queue, error) {
		q, err := c.b.updateQueue(ctx, name, s)
		if err != nil {
			return nil, opErr(fmt.Sprintf("updating queue %q", name), err)
		}
		return q, nil
	})
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
	q, err := c.b.setQueuePaused(ctx, name, paused)
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
	return c.b.namespaceQueue(ctx)
}
