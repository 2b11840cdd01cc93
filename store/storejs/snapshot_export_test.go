package storejs

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

// Restored is the log sequence of the snapshot Open restored (0: none).
func (s *Store) Restored() uint64 { return s.restored }

// LogBounds are the log's first and last sequences.
func (s *Store) LogBounds(ctx context.Context) (first, last uint64, err error) {
	return s.jl.bounds(ctx)
}

// SnapshotBucket is the object store of the cluster's snapshots.
// (created if missing).
func (s *Store) SnapshotBucket() jetstream.ObjectStore {
	b, err := s.bucket(context.Background(), true)
	if err != nil {
		panic(err)
	}
	return b
}

// AppliedSeq is the log sequence the replica reached.
func (s *Store) AppliedSeq() uint64 { return s.appliedSeq() }
