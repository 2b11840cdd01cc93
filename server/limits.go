package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/internal/clock"
)

// Caps per principal (docs/security.md, "Caps per principal"): each principal
// (a token's name) may make Config.PrincipalRate requests a second, in bursts of
// Config.PrincipalBurst (a token bucket), and hold Config.MaxStreamsPerPrincipal
// long streams open (streamreg.go). They are counted after authentication, so a
// request with an unknown token creates no state here (the Authenticator's
// negative cache keeps such a flood off the store), and by principal, so a
// principal's worker processes and callers share one budget per server. Under
// Config.Insecure every request is the same principal, so neither applies; the
// server's own caps (MaxInFlight, MaxStreams) do.

// Defaults of the caps per principal.
const (
	// DefaultPrincipalRate is requests a second per principal: about what
	// `trellis bench --server` makes through one token at its peak on the
	// 2-core machine of docs/http-api.md (api-start, a POST a start: 14,000
	// to 21,000 starts/s; w1: about 1.1 requests a run), so that one token
	// cannot take the whole of a server that serves many; a deployment with
	// one very busy token raises it (--principal-rate).
	DefaultPrincipalRate = 20_000
	// DefaultPrincipalBurst is the bucket of DefaultPrincipalRate: a second's
	// worth.
	DefaultPrincipalBurst = 20_000
	// DefaultMaxStreamsPerPrincipal caps a principal's open streams: a
	// quarter of MaxStreams' default; far more than a pool of worker processes
	// holds (each about three: a Claim and two Subscribe streams), enough for
	// a service that relays run streams to its own users through one token.
	DefaultMaxStreamsPerPrincipal = 5000
	// maxLimiters bounds the principals with a token bucket. Only
	// authenticated principals get one, so it is reached only by a store with
	// that many tokens in use; then the idle buckets (full) are dropped.
	maxLimiters = 10_000
)

// limitError is ErrRateLimited with the time after which a retry may pass: the
// answer's Retry-After.
type limitError struct {
	msg   string
	after time.Duration
}

func (e *limitError) Error() string { return ErrRateLimited.Error() + ": " + e.msg }
func (e *limitError) Unwrap() error { return ErrRateLimited }

// retryAfterSeconds is Retry-After of a limitError: whole seconds, at least 1.
func (e *limitError) retryAfterSeconds() int {
	return max(1, int(math.Ceil(e.after.Seconds())))
}

// setRetryAfter sets Retry-After on an answer refused by a cap per principal.
func setRetryAfter(h http.Header, err error) {
	if le := (*limitError)(nil); errors.As(err, &le) {
		h.Set("Retry-After", strconv.Itoa(le.retryAfterSeconds()))
	}
}

// rateLimiter is the token buckets of the principals, by name.
type rateLimiter struct {
	limit rate.Limit
	burst int

	mu sync.Mutex
	m  map[string]*rate.Limiter
}

func newRateLimiter(perSecond float64, burst int) *rateLimiter {
	if perSecond < 0 {
		return nil // no limit
	}
	return &rateLimiter{limit: rate.Limit(perSecond), burst: burst, m: map[string]*rate.Limiter{}}
}

// allow takes a token of p's bucket, or says how long until one is there.
func (l *rateLimiter) allow(p *auth.Principal, now time.Time) error {
	if l == nil {
		return nil
	}
	lim := l.bucket(p.Name, now)
	if lim.AllowN(now, 1) {
		return nil
	}
	wait := time.Duration((1 - lim.TokensAt(now)) / float64(l.limit) * float64(time.Second))
	return &limitError{msg: fmt.Sprintf("principal %q made more than %g requests a second (burst %d)", p.Name, float64(l.limit), l.burst),
		after: wait}
}

// bucket returns the bucket of principal name, making it if need be.
func (l *rateLimiter) bucket(name string, now time.Time) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lim, ok := l.m[name]; ok {
		return lim
	}
	if len(l.m) >= maxLimiters {
		l.dropIdle(now)
	}
	lim := rate.NewLimiter(l.limit, l.burst)
	l.m[name] = lim
	return lim
}

// dropIdle forgets the buckets that are full (a principal that has not asked
// for a while: forgetting it changes nothing), or all of them when none is.
func (l *rateLimiter) dropIdle(now time.Time) {
	for name, lim := range l.m {
		if lim.TokensAt(now) >= float64(l.burst) {
			delete(l.m, name)
		}
	}
	if len(l.m) >= maxLimiters {
		clear(l.m)
	}
}

// allowRequest counts a request of principal p against its rate (nothing
// under Insecure).
func (s *Server) allowRequest(p *auth.Principal) error {
	if s.cfg.Insecure {
		return nil
	}
	return s.rates.allow(p, s.cfg.Clock.Now())
}

// Unknown credentials from one source (docs/security.md, "Caps per
// principal"): the Authenticator remembers a secret that matched no token, so
// that the same one sent again costs no store read; but a flood of distinct
// well-formed secrets would cost a read each. So each source (an address
// through trusted proxies, clientAddr; an IPv6 address by its /64, which one
// host holds whole) may have DefaultUnknownLookupRate store reads a second
// find no token, in bursts of DefaultUnknownLookupBurst; beyond it, its
// credentials the caches do not answer are refused 429 without a read until
// the bucket refills. A read takes its token before it runs (so concurrent
// reads cannot overshoot the burst) and gives it back when it found a token.
// Credentials found live at their last read skip the gate (storeauth), so
// tokens in use are not refused when their cache entry ends; other sources
// are not affected.
const (
	DefaultUnknownLookupRate  = 20
	DefaultUnknownLookupBurst = 200
)

// unknownLookups is the storeauth.LookupGate of the server's default
// Authenticator: token buckets of the sources, one token per read that found
// no token.
type unknownLookups struct {
	l     *rateLimiter
	clock clock.Clock
}

// Admit implements storeauth.LookupGate.
func (g unknownLookups) Admit(ctx context.Context) (func(found bool), error) {
	ri := requestInfoOf(ctx)
	if g.l == nil || ri == nil || ri.source == "" {
		return func(bool) {}, nil // a stream's re-check, or a request the server made itself
	}
	src := sourceKey(ri.source)
	now := g.clock.Now()
	r := g.l.bucket(src, now).ReserveN(now, 1)
	if wait := r.DelayFrom(now); !r.OK() || wait > 0 {
		r.CancelAt(now)
		return nil, &limitError{msg: fmt.Sprintf("%s sent more than %g unknown credentials a second (burst %d)",
			src, float64(g.l.limit), g.l.burst), after: wait}
	}
	return func(found bool) {
		if found {
			// The token goes back: a cancellation as of the reservation's
			// time restores it (less what later reservations took since).
			r.CancelAt(now)
		}
	}, nil
}

// sourceKey is the bucket of a source address: an IPv6 address by its /64.
func sourceKey(source string) string {
	a, err := netip.ParseAddr(source)
	if err != nil || !a.Is6() || a.Is4In6() {
		return source
	}
	p, _ := a.Prefix(64)
	return p.String()
}
