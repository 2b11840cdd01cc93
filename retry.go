package trellis

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// Backoff computes the delay before retry number n (n = 1 after the first failure).
type Backoff interface {
	Delay(n int) time.Duration
}

// ExponentialBackoff waits Initial, then Initial*Factor, ... capped at Max, each delay
// varied by up to ±Jitter (a fraction, e.g. 0.1) so that retries of many runs spread out.
type ExponentialBackoff struct {
	Initial time.Duration
	Factor  float64
	Max     time.Duration
	Jitter  float64
}

// Exponential returns an exponential backoff with 10% jitter.
func Exponential(initial time.Duration, factor float64, max time.Duration) ExponentialBackoff {
	return ExponentialBackoff{Initial: initial, Factor: factor, Max: max, Jitter: 0.1}
}

// Delay implements Backoff.
func (b ExponentialBackoff) Delay(n int) time.Duration {
	factor := b.Factor
	if factor < 1 {
		factor = 1
	}
	d := float64(b.Initial) * math.Pow(factor, float64(max(n-1, 0)))
	if b.Max > 0 && d > float64(b.Max) {
		d = float64(b.Max)
	}
	if b.Jitter > 0 {
		d += d * b.Jitter * (2*rand.Float64() - 1) // retry timing is not replayed
	}
	return time.Duration(max(d, 0))
}

// FixedBackoff waits the same delay before every retry.
type FixedBackoff time.Duration

// Fixed returns a backoff that always waits d.
func Fixed(d time.Duration) FixedBackoff { return FixedBackoff(d) }

// Delay implements Backoff.
func (b FixedBackoff) Delay(int) time.Duration { return time.Duration(b) }

// RetryPolicy says how a failing step is retried, or, as WorkflowOptions.Retry
// and StartOptions.Retry, how a failing run is (see docs/workflow-retries.md).
// The zero value means 3 attempts with exponential backoff from 1s, doubling,
// capped at 1 minute.
type RetryPolicy struct {
	// MaxAttempts counts the first attempt: 1 disables retries. 0 means 3.
	// An attempt that ended without its worker (lost: the worker died or was
	// cut off while it ran; timed out: the store ended it past its timeout
	// plus a grace) counts as one; the next starts without the backoff.
	MaxAttempts int
	// Backoff between attempts. nil means Exponential(time.Second, 2, time.Minute).
	Backoff Backoff
	// NonRetryableTypes lists error types (as recorded, e.g. "*mypkg.DeclinedError")
	// that fail the step at once. Errors wrapped with NonRetryable always do.
	NonRetryableTypes []string
}

func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 3
	}
	if p.Backoff == nil {
		p.Backoff = Exponential(time.Second, 2, time.Minute)
	}
	return p
}

// runRetry converts p, a workflow retry policy, into the form the store keeps
// and applies (store.RunRetry), its defaults applied: nil for nil. The store
// computes the backoff, so it must be one of the package's: Exponential
// (ExponentialBackoff) or Fixed (FixedBackoff), with a positive first delay.
func (p *RetryPolicy) runRetry() (*store.RunRetry, error) {
	if p == nil {
		return nil, nil
	}
	q := p.withDefaults()
	r := &store.RunRetry{MaxAttempts: q.MaxAttempts, NonRetryableTypes: slices.Clone(q.NonRetryableTypes)}
	switch b := q.Backoff.(type) {
	case ExponentialBackoff:
		r.InitialBackoff, r.Factor, r.MaxBackoff, r.Jitter = store.Duration(b.Initial), max(b.Factor, 1), store.Duration(b.Max), b.Jitter
		if b.Max <= 0 {
			r.MaxBackoff = store.Duration(365 * 24 * time.Hour) // no cap, as far as a retry goes
		}
	case *ExponentialBackoff:
		return (&RetryPolicy{MaxAttempts: q.MaxAttempts, Backoff: *b, NonRetryableTypes: q.NonRetryableTypes}).runRetry()
	case FixedBackoff:
		r.InitialBackoff, r.Factor, r.MaxBackoff = store.Duration(b), 1, store.Duration(b)
	default:
		return nil, fmt.Errorf("%w: a workflow retry policy takes a trellis.Exponential or trellis.Fixed backoff (the store computes its delays), not %T",
			ErrInvalidParams, q.Backoff)
	}
	if r.InitialBackoff <= 0 {
		return nil, fmt.Errorf("%w: a workflow retry policy needs a positive first backoff", ErrInvalidParams)
	}
	if r.MaxBackoff < r.InitialBackoff {
		r.MaxBackoff = r.InitialBackoff
	}
	if err := r.Validate(); err != nil {
		return nil, err
	}
	return r, nil
}

// RetryPolicyOf returns the policy that StartOptions.Retry takes for r, a
// workflow retry policy in its stored form (the API's retry object, which
// r.Validate checks): an exponential backoff with r's parameters, their
// defaults applied. nil for nil.
func RetryPolicyOf(r *RunRetry) *RetryPolicy {
	if r == nil {
		return nil
	}
	initial, factor, maxd := time.Duration(r.InitialBackoff), r.Factor, time.Duration(r.MaxBackoff)
	if initial == 0 {
		initial = time.Duration(store.DefaultRetryInitial)
	}
	if factor == 0 {
		factor = store.DefaultRetryFactor
	}
	if maxd == 0 {
		maxd = max(time.Duration(store.DefaultRetryMax), initial)
	}
	return &RetryPolicy{MaxAttempts: r.MaxAttempts, NonRetryableTypes: slices.Clone(r.NonRetryableTypes),
		Backoff: ExponentialBackoff{Initial: initial, Factor: factor, Max: maxd, Jitter: r.Jitter}}
}
