package storejs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/trellis-dev/trellis/store/storejs/internal/forward"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// writesSubject is the subject the writer serves forwarded writes on.
func writesSubject(name string) string { return "trellis." + name + ".writes" }

// newForwarder is a follower's way to the writer: a forwarded write returns
// once this server's replica applied the writer's answer (read-your-writes).
func newForwarder(s *Store) forwarder {
	// A write in flight when a new writer's epoch record arrives was sent to
	// the writer before it, which may have died with it unanswered: it waits
	// a lease's time more (a deposed writer that is alive answers within
	// it: it steps down when its lease goes unrenewed), then fails as of
	// unknown outcome (a client retries it with its idempotency key) instead
	// of waiting out the request's timeout (30 s).
	return &forward.Client{NC: s.nc, Subject: writesSubject(s.cfg.Name), Wait: s.waitApplied,
		LeaderChanged: s.epochChanged, ChangeGrace: s.cfg.LeaseDuration}
}

// serve answers the followers' forwarded writes while this server writes the
// log; the function it returns stops answering and waits for the writes in
// flight.
func (s *Store) serve() func() {
	stop, err := forward.Serve(s.nc, writesSubject(s.cfg.Name), s.handleForwarded)
	if err != nil {
		// The followers' writes find no writer and fail with
		// forward.ErrNoLeader; this server's own still work.
		s.log.Error("storejs: serving forwarded writes", "err", err)
		return func() {}
	}
	return stop
}

// handleForwarded runs one forwarded write on the replica. A server that does
// not write the log, or was deposed while the write ran (its batch rolled
// back), answers forward.ErrNotLeader: the follower tries again, and finds the
// new writer.
func (s *Store) handleForwarded(ctx context.Context, method string, raw json.RawMessage) (any, uint64, error) {
	if !s.isLeading() {
		return nil, 0, forward.ErrNotLeader
	}
	res, err := s.serveForwarded(ctx, method, raw)
	if errors.Is(err, storesqlite.ErrReplica) || errors.Is(err, errFenced) {
		return nil, 0, fmt.Errorf("%w: %w", forward.ErrNotLeader, err)
	}
	// The sequence the replica reached after the write: the write's record
	// or a later one.
	return res, s.appliedSeq(), err
}
