package server

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"connectrpc.com/connect"

	"github.com/trellis-dev/trellis/internal/auth"
	ww "github.com/trellis-dev/trellis/internal/workerwire"
)

// The caps per principal (limits.go) and the registry of open streams
// (streamreg.go) on the worker protocol: its calls are counted in
// inFlightLimit's interceptor (worker.go), before their handler, which
// authenticates and authorizes them as before (the Authenticator's cache makes
// the second authentication a lookup in memory).

// DefaultWorkerStreamIdleTimeout is Config.WorkerStreamIdleTimeout's default.
const DefaultWorkerStreamIdleTimeout = 5 * time.Minute

// workerPrincipalKey carries the principal of a worker call from its
// interceptor to its handler (workerService.caller).
type workerPrincipalKey struct{}

// admitWorkerCall authenticates a unary worker call once, counts it against
// its principal's rate, and hands the principal to the handler in the
// context. A call that does not authenticate is refused here.
func (s *Server) admitWorkerCall(ctx context.Context, req connect.AnyRequest) (context.Context, error) {
	p, err := s.authenticate(ctx, req.Header().Get("Authorization"))
	if err != nil {
		return nil, fail(err)
	}
	if !s.cfg.Insecure {
		if err := workerLimitErr(s.allowRequest(p)); err != nil {
			return nil, err
		}
	}
	return context.WithValue(ctx, workerPrincipalKey{}, p), nil
}

// wrapWorkerStream counts a Claim or Subscribe stream against its principal's
// rate and streams, and registers it: when its credential no longer
// authenticates, its context is cancelled (the handler returns) and the stream
// ends with unauthenticated.
func (s *Server) wrapWorkerStream(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		header := conn.RequestHeader().Get("Authorization")
		p, err := s.authenticate(ctx, header)
		if err != nil {
			return fail(err)
		}
		ctx = context.WithValue(ctx, workerPrincipalKey{}, p) // the handler's caller
		if s.cfg.Insecure {
			return next(ctx, conn)
		}
		if err := s.allowRequest(p); err != nil {
			return workerLimitErr(err)
		}
		vals := ctx
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var revoked atomic.Bool
		check := func(ctx context.Context) error {
			_, err := s.authenticate(valuesOf{ctx, vals}, header)
			return err
		}
		unregister, err := s.trackStream(p, credentialKey(p.Name, header, ""), check, func() {
			revoked.Store(true)
			cancel()
		})
		if err != nil {
			return workerLimitErr(err)
		}
		defer unregister()
		err = next(ctx, conn)
		if revoked.Load() {
			return ww.ToConnect(fmt.Errorf("%w: the stream's token no longer authenticates (revoked or expired)", auth.ErrUnauthenticated))
		}
		return err
	}
}

// workerLimitErr is a cap's refusal as the worker protocol says it:
// resource_exhausted (RATE_LIMITED), with a Retry-After in its metadata.
func workerLimitErr(err error) error {
	if err == nil {
		return nil
	}
	if !errors.Is(err, ww.ErrRateLimited) {
		err = fmt.Errorf("%w: %v", ww.ErrRateLimited, err)
	}
	ce := ww.ToConnect(err).(*connect.Error)
	if le := (*limitError)(nil); errors.As(err, &le) {
		ce.Meta().Set("Retry-After", strconv.Itoa(le.retryAfterSeconds()))
	}
	return ce
}
