package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// QueueStore manages namespaces and queues as objects (see docs/queues.md). A
// namespace or queue without a record behaves with the implicit defaults: runs may be
// created in any namespace and queue, configured or not. Creating a queue needs its
// namespace's record.
//
// A queue's limits are enforced where runs are claimed (RunsClaim), across every
// worker of the store: a paused queue's runs are not claimed (the running ones
// finish); at most ConcurrencyLimit of its runs run at once; at most KeyLimit of its
// runs with the same concurrency key run at once, the keys served fairly (the key
// with the fewest running runs first, at equal priority); and runs start at most
// RatePerSecond per second with bursts of RateBurst (a token bucket kept in the
// store).
type QueueStore interface {
	// NamespaceCreate creates a namespace record. ErrNamespaceExists when it has
	// one already, as DefaultNamespace has in every store.
	NamespaceCreate(ctx context.Context, p *NamespaceCreateParams) (*Namespace, error)
	// NamespaceGet returns a namespace. ErrNamespaceNotFound without a record.
	NamespaceGet(ctx context.Context, p *NamespaceGetParams) (*Namespace, error)
	// NamespaceList lists the namespace records by name.
	NamespaceList(ctx context.Context) ([]*Namespace, error)
	// NamespaceUpdate changes the fields set in p. ErrNamespaceNotFound.
	NamespaceUpdate(ctx context.Context, p *NamespaceUpdateParams) (*Namespace, error)

	// QueueCreate creates a queue record. ErrNamespaceNotFound when the namespace
	// has no record, ErrQueueExists when the queue has one.
	QueueCreate(ctx context.Context, p *QueueCreateParams) (*Queue, error)
	// QueueGet returns a queue. ErrQueueNotFound without a record.
	QueueGet(ctx context.Context, p *QueueGetParams) (*Queue, error)
	// QueueList lists the queue records of a namespace by name.
	// ErrNamespaceNotFound when the namespace has no record.
	QueueList(ctx context.Context, p *QueueListParams) ([]*Queue, error)
	// QueueUpdate changes the fields set in p. ErrQueueNotFound.
	QueueUpdate(ctx context.Context, p *QueueUpdateParams) (*Queue, error)
	// QueuePause pauses (Paused true) or resumes a queue. ErrQueueNotFound;
	// ErrQueueState when it is already paused (or not paused).
	QueueSetPaused(ctx context.Context, p *QueueSetPausedParams) (*Queue, error)
}

// Errors of the queue store.
var (
	ErrNamespaceNotFound = errors.New("namespace not found")
	ErrNamespaceExists   = errors.New("namespace already exists")
	ErrQueueNotFound     = errors.New("queue not found")
	ErrQueueExists       = errors.New("queue already exists")
	// ErrQueueState: pausing a paused queue, or resuming one that is not paused.
	ErrQueueState = errors.New("queue is already in that state")
)

// Duration is a time.Duration that reads and writes JSON as a Go duration string
// ("720h0m0s"); it also reads a number of nanoseconds.
type Duration time.Duration

// MarshalJSON implements json.Marshaler.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// String formats d as time.Duration does ("1.5s").
func (d Duration) String() string { return time.Duration(d).String() }

// UnmarshalJSON implements json.Unmarshaler.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err := json.Unmarshal(b, &n); err != nil {
			return fmt.Errorf("a duration is a string such as \"720h\" or \"1m30s\"")
		}
		*d = Duration(n)
		return nil
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("bad duration %q: %w", s, err)
	}
	*d = Duration(v)
	return nil
}

// DefaultRetention is a namespace's retention period when none is set.
const DefaultRetention = Duration(30 * 24 * time.Hour)

// DefaultQueueName is a namespace's default queue when none is set.
const DefaultQueueName = "default"

// DefaultNamespace is the namespace of clients and workers that name none. Every
// store has its record from the start (a migration writes it with the defaults
// above), so that its queues can be created without creating it first.
const DefaultNamespace = "default"

// Namespace is a namespace's record.
type Namespace struct {
	Name string `json:"name"`
	// Retention is how long finished runs are kept.
	Retention Duration `json:"retention"`
	// DefaultQueue is the queue of runs started without one.
	DefaultQueue string `json:"default_queue"`
	// PayloadLimit caps a run's input in bytes; 0: no limit.
	PayloadLimit int       `json:"payload_limit,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
	UpdatedAt    time.Time `json:"updated_at"`
}

// QueueRetry is a queue's default retry policy for steps.
type QueueRetry struct {
	// MaxAttempts counts the first attempt.
	MaxAttempts int `json:"max_attempts"`
	// InitialBackoff and MaxBackoff bound an exponential backoff (factor 2).
	InitialBackoff Duration `json:"initial_backoff,omitempty"`
	MaxBackoff     Duration `json:"max_backoff,omitempty"`
}

// Queue is a queue's record. A zero limit means none.
type Queue struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Paused    bool   `json:"paused"`
	// ConcurrencyLimit caps the queue's running runs.
	ConcurrencyLimit int `json:"concurrency_limit,omitempty"`
	// KeyLimit caps the running runs of each concurrency key of the queue.
	KeyLimit int `json:"key_limit,omitempty"`
	// RatePerSecond caps how many runs start per second, with bursts of
	// RateBurst (at least 1).
	RatePerSecond float64 `json:"rate_per_second,omitempty"`
	RateBurst     int     `json:"rate_burst,omitempty"`
	// PayloadLimit caps a run's input in bytes.
	PayloadLimit int `json:"payload_limit,omitempty"`
	// Priority is the default priority of its runs.
	Priority int `json:"priority,omitempty"`
	// Retry is the default retry policy of its runs' steps.
	Retry     *QueueRetry `json:"retry,omitempty"`
	CreatedAt time.Time   `json:"created_at"`
	UpdatedAt time.Time   `json:"updated_at"`
}

// Restricted reports whether q limits claims at all.
func (q *Queue) Restricted() bool {
	return q.Paused || q.ConcurrencyLimit > 0 || q.KeyLimit > 0 || q.RatePerSecond > 0
}

// NamespaceCreateParams are the parameters of NamespaceCreate. Zero fields take
// the defaults.
type NamespaceCreateParams struct {
	Name         string   `json:"name"`
	Retention    Duration `json:"retention,omitempty"`
	DefaultQueue string   `json:"default_queue,omitempty"`
	PayloadLimit int      `json:"payload_limit,omitempty"`
	// Idempotency, when set, records an idempotency key with the creation,
	// atomically (see IdempotencyStore), in the namespace it creates; its
	// response renders the *Namespace. Over HTTP the key is the
	// Idempotency-Key header, never a field.
	Idempotency *IdempotencyRecord `json:"-"`
}

// NamespaceGetParams are the parameters of NamespaceGet.
type NamespaceGetParams struct {
	Name string `json:"name"`
}

// NamespaceUpdateParams are the parameters of NamespaceUpdate: nil fields are
// left as they are.
type NamespaceUpdateParams struct {
	Name         string    `json:"name,omitempty"`
	Retention    *Duration `json:"retention,omitempty"`
	DefaultQueue *string   `json:"default_queue,omitempty"`
	PayloadLimit *int      `json:"payload_limit,omitempty"`
	// Idempotency, when set, records an idempotency key with the change,
	// atomically (see IdempotencyStore); its response renders the *Namespace.
	Idempotency *IdempotencyRecord `json:"-"`
}

// QueueSettings are a queue's settable fields; nil fields are left as they are
// (on create: none).
type QueueSettings struct {
	ConcurrencyLimit *int        `json:"concurrency_limit,omitempty"`
	KeyLimit         *int        `json:"key_limit,omitempty"`
	RatePerSecond    *float64    `json:"rate_per_second,omitempty"`
	RateBurst        *int        `json:"rate_burst,omitempty"`
	PayloadLimit     *int        `json:"payload_limit,omitempty"`
	Priority         *int        `json:"priority,omitempty"`
	Retry            *QueueRetry `json:"retry,omitempty"`
}

// QueueCreateParams are the parameters of QueueCreate.
type QueueCreateParams struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Paused    bool   `json:"paused,omitempty"`
	QueueSettings
	// Idempotency, when set, records an idempotency key with the creation,
	// atomically (see IdempotencyStore); its response renders the *Queue.
	Idempotency *IdempotencyRecord `json:"-"`
}

// QueueGetParams are the parameters of QueueGet.
type QueueGetParams struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// QueueListParams are the parameters of QueueList.
type QueueListParams struct {
	Namespace string `json:"namespace"`
}

// QueueUpdateParams are the parameters of QueueUpdate.
type QueueUpdateParams struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	QueueSettings
	// Idempotency: as QueueCreateParams'.
	Idempotency *IdempotencyRecord `json:"-"`
}

// QueueSetPausedParams are the parameters of QueueSetPaused.
type QueueSetPausedParams struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Paused    bool   `json:"paused"`
	// Idempotency: as QueueCreateParams'. A retry with the key is told the key
	// is used, not ErrQueueState.
	Idempotency *IdempotencyRecord `json:"-"`
}

func positive(field string, v *int) error {
	if v != nil && *v <= 0 {
		return fmt.Errorf("%w: %s must be positive, not %d", ErrInvalidParams, field, *v)
	}
	return nil
}

// Validate reports the first malformed field of p, wrapping ErrInvalidParams.
func (p *NamespaceCreateParams) Validate() error {
	if err := ValidateNamespace(p.Name); err != nil {
		return err
	}
	r, q, l := p.Retention, p.DefaultQueue, p.PayloadLimit
	if err := validateNamespaceFields(ptrIf(r != 0, &r), ptrIf(q != "", &q), ptrIf(l != 0, &l)); err != nil {
		return err
	}
	return p.Idempotency.Validate()
}

// Validate reports the first malformed field of p, wrapping ErrInvalidParams.
func (p *NamespaceUpdateParams) Validate() error {
	if err := ValidateNamespace(p.Name); err != nil {
		return err
	}
	if err := validateNamespaceFields(p.Retention, p.DefaultQueue, p.PayloadLimit); err != nil {
		return err
	}
	return p.Idempotency.Validate()
}

func ptrIf[T any](ok bool, v *T) *T {
	if ok {
		return v
	}
	return nil
}

func validateNamespaceFields(retention *Duration, queue *string, limit *int) error {
	if retention != nil && *retention <= 0 {
		return fmt.Errorf("%w: retention must be positive, not %v", ErrInvalidParams, time.Duration(*retention))
	}
	if queue != nil {
		if err := ValidateName("default queue", *queue); err != nil {
			return err
		}
	}
	return positive("payload_limit", limit)
}

// Validate reports the first malformed field of s, wrapping ErrInvalidParams.
func (s *QueueSettings) Validate() error {
	for _, f := range []struct {
		name string
		v    *int
	}{{"concurrency_limit", s.ConcurrencyLimit}, {"key_limit", s.KeyLimit}, {"rate_burst", s.RateBurst},
		{"payload_limit", s.PayloadLimit}} {
		if err := positive(f.name, f.v); err != nil {
			return err
		}
	}
	if s.RatePerSecond != nil && !(*s.RatePerSecond > 0) {
		return fmt.Errorf("%w: rate_per_second must be positive, not %v", ErrInvalidParams, *s.RatePerSecond)
	}
	if r := s.Retry; r != nil {
		switch {
		case r.MaxAttempts <= 0:
			return fmt.Errorf("%w: retry.max_attempts must be positive, not %d", ErrInvalidParams, r.MaxAttempts)
		case r.InitialBackoff < 0 || r.MaxBackoff < 0:
			return fmt.Errorf("%w: retry backoffs must not be negative", ErrInvalidParams)
		}
	}
	return nil
}

// Validate reports the first malformed field of p, wrapping ErrInvalidParams.
func (p *QueueCreateParams) Validate() error {
	return validateQueueCall(p.Namespace, p.Name, &p.QueueSettings, p.Idempotency)
}

// Validate reports the first malformed field of p, wrapping ErrInvalidParams.
func (p *QueueUpdateParams) Validate() error {
	return validateQueueCall(p.Namespace, p.Name, &p.QueueSettings, p.Idempotency)
}

// Validate reports the first malformed field of p, wrapping ErrInvalidParams.
func (p *QueueSetPausedParams) Validate() error {
	return validateQueueCall(p.Namespace, p.Name, nil, p.Idempotency)
}

// validateQueueCall checks the fields of a queue call: names, settings (nil:
// none) and key.
func validateQueueCall(namespace, name string, s *QueueSettings, rec *IdempotencyRecord) error {
	if err := ValidateNamespace(namespace); err != nil {
		return err
	}
	if err := ValidateName("queue", name); err != nil {
		return err
	}
	if s != nil {
		if err := s.Validate(); err != nil {
			return err
		}
	}
	return rec.Validate()
}

// Apply sets the fields of q that s sets.
func (s *QueueSettings) Apply(q *Queue) {
	set := func(dst *int, v *int) {
		if v != nil {
			*dst = *v
		}
	}
	set(&q.ConcurrencyLimit, s.ConcurrencyLimit)
	set(&q.KeyLimit, s.KeyLimit)
	set(&q.RateBurst, s.RateBurst)
	set(&q.PayloadLimit, s.PayloadLimit)
	set(&q.Priority, s.Priority)
	if s.RatePerSecond != nil {
		q.RatePerSecond = *s.RatePerSecond
		if q.RateBurst == 0 {
			q.RateBurst = 1
		}
	}
	if s.Retry != nil {
		r := *s.Retry
		q.Retry = &r
	}
}
