package storejs

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// notFound are the errors by which a read says that what it was asked for
// does not exist.
var notFound = []error{
	store.ErrRunNotFound, store.ErrKeyNotFound, store.ErrApprovalNotFound,
	store.ErrTokenNotFound, store.ErrIdempotencyKeyNotFound,
	store.ErrNamespaceNotFound, store.ErrScheduleNotFound,
}

// confirmTimeout bounds how long confirmAbsent waits for the log's end and
// for the replica to apply it. A variable for tests.
var confirmTimeout = 5 * time.Second

// confirmAbsent is called with the error of a read of the local replica.
// When it says that something does not exist and this server follows the
// log, the replica may only lag behind it: a run started through another
// server a moment ago, acknowledged there, is in the log but maybe not yet
// here, and a client that was told "created" by one server and "not found"
// by the next (behind a load balancer, or retrying elsewhere) would take the
// second for the truth. So a follower asks the log's stream for its last
// sequence and waits until its replica applied it; then (again) the read is
// made once more. A writer's replica holds every acknowledged write: its
// answer stands. When the end cannot be read, or the replica does not reach
// it within confirmTimeout, the read fails with that error rather than
// answer "not found" unconfirmed.
//
// Reads that find what they look for, and lists (which a follower serves as
// its replica has them), pay nothing.
func (s *Store) confirmAbsent(ctx context.Context, err error) (again bool, _ error) {
	if err == nil || !isNotFound(err) {
		return false, nil
	}
	s.mu.Lock()
	leading, head := s.leading, s.head
	s.mu.Unlock()
	if leading || s.jl == nil {
		return false, nil
	}
	cctx, cancel := context.WithTimeout(ctx, confirmTimeout)
	defer cancel()
	last, lerr := s.jl.last(cctx)
	if lerr != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, fmt.Errorf("storejs: confirming %q against the log's end: %w", err, lerr)
	}
	// Read again even when the head was there already: it may have moved
	// between the first read and the look at it above.
	if last <= head {
		return true, nil
	}
	if werr := s.waitApplied(cctx, last); werr != nil {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		return false, fmt.Errorf("storejs: confirming %q: the replica did not apply the log up to its end (%d; it is at %d) within %s: %w",
			err, last, s.appliedSeq(), confirmTimeout, werr)
	}
	return true, nil
}

func isNotFound(err error) bool {
	for _, nf := range notFound {
		if errors.Is(err, nf) {
			return true
		}
	}
	return false
}
