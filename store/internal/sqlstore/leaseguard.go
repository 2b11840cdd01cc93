package sqlstore

import (
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// LeaseReplay decides about a guarded lease write (store.CheckpointParams.Seq)
// of lease l, with sequence seq and fingerprint fp, whose fenced update matched
// no row, from the run's row: its last lease token, and the last sequence and
// fingerprint applied under that token. A write of the run's last lease at or
// below that sequence was applied already: it is answered as applied (a result
// with Replayed set, for the caller to fill), or refused with
// store.ErrIdempotencyKeyConflict when it is the last one and its request
// differs. Anything else lost its lease.
func LeaseReplay(l store.Lease, seq, fp, token, lastSeq, lastFP int64) (*store.CheckpointResult, error) {
	switch {
	case seq == 0 || token != l.Token || seq > lastSeq:
		return nil, fmt.Errorf("%w: run %q token %d", store.ErrLeaseLost, l.RunID, l.Token)
	case seq == lastSeq && fp != 0 && lastFP != 0 && fp != lastFP:
		return nil, fmt.Errorf("%w: write %d of lease %d of run %q", store.ErrIdempotencyKeyConflict, seq, l.Token, l.RunID)
	}
	return &store.CheckpointResult{Replayed: true}, nil
}
