package storejs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// The leader lease chooses which server writes the log: a key of a KeyValue
// bucket, TRELLIS_<name>_LEADER, holding the leader's epoch and name. The
// leader renews it (a compare-and-set on its revision) every fourth of the
// lease's duration, and gives it up by clearing the owner (keeping the
// epoch); a server that sees the revision unchanged for a whole
// duration, by its own clock, takes it over with the next epoch. The lease
// only chooses: what keeps a deposed leader that has not noticed yet from
// writing is the log's expected last sequence, which the new leader's epoch
// record moves on.

const leaseKey = "leader"

// DefaultLeaseDuration is how long a leader lease lasts unrenewed.
const DefaultLeaseDuration = 3 * time.Second

type leaseValue struct {
	Epoch uint64 `json:"epoch"`
	Owner string `json:"owner"`
}

func leaseBucket(name string) string { return "TRELLIS_" + name + "_LEADER" }

func openLease(ctx context.Context, js jetstream.JetStream, name string, replicas int) (jetstream.KeyValue, error) {
	kv, err := js.KeyValue(ctx, leaseBucket(name))
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket: leaseBucket(name), Description: "Trellis writer lease of cluster " + name,
			History: 1, Storage: jetstream.FileStorage, Replicas: replicas,
		})
	}
	if err != nil {
		return nil, fmt.Errorf("opening the leader lease bucket %s: %w", leaseBucket(name), err)
	}
	return kv, nil
}

// lease is one server's view of the leader lease.
type lease struct {
	kv    jetstream.KeyValue
	owner string
	ttl   time.Duration

	rev     uint64    // the revision last seen
	seen    time.Time // when it was first seen (monotonic)
	holder  leaseValue
	holding bool
}

// acquire takes the lease when it is free or lapsed, with an epoch above
// both the holder's and minEpoch; it reports the epoch when it did.
func (l *lease) acquire(ctx context.Context, minEpoch uint64) (uint64, bool, error) {
	e, err := l.kv.Get(ctx, leaseKey)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		v := leaseValue{Epoch: minEpoch + 1, Owner: l.owner}
		rev, err := l.kv.Create(ctx, leaseKey, mustJSON(v))
		if err != nil {
			return 0, false, nil // another server was faster
		}
		l.took(rev, v)
		return v.Epoch, true, nil
	case err != nil:
		return 0, false, fmt.Errorf("reading the leader lease: %w", err)
	}
	var cur leaseValue
	if err := json.Unmarshal(e.Value(), &cur); err != nil {
		return 0, false, fmt.Errorf("reading the leader lease: %w", err)
	}
	now := time.Now()
	free := cur.Owner == "" // released (release)
	if e.Revision() != l.rev {
		l.rev, l.seen, l.holder = e.Revision(), now, cur
		if cur.Owner != l.owner && !free {
			return 0, false, nil
		}
	} else if cur.Owner != l.owner && !free && now.Sub(l.seen) < l.ttl {
		return 0, false, nil
	}
	v := leaseValue{Epoch: max(cur.Epoch, minEpoch) + 1, Owner: l.owner}
	rev, err := l.kv.Update(ctx, leaseKey, mustJSON(v), e.Revision())
	if err != nil {
		return 0, false, nil
	}
	l.took(rev, v)
	return v.Epoch, true, nil
}

// force takes the lease over now, lapsed or not (Store.takeOver).
func (l *lease) force(ctx context.Context, minEpoch uint64) (uint64, error) {
	e, err := l.kv.Get(ctx, leaseKey)
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, fmt.Errorf("reading the leader lease: %w", err)
	}
	var cur leaseValue
	var rev uint64
	if err == nil {
		if err := json.Unmarshal(e.Value(), &cur); err != nil {
			return 0, fmt.Errorf("reading the leader lease: %w", err)
		}
		rev = e.Revision()
	}
	v := leaseValue{Epoch: max(cur.Epoch, minEpoch) + 1, Owner: l.owner}
	if rev, err = l.kv.Update(ctx, leaseKey, mustJSON(v), rev); err != nil {
		return 0, fmt.Errorf("taking the leader lease over: %w", err)
	}
	l.took(rev, v)
	return v.Epoch, nil
}

func (l *lease) took(rev uint64, v leaseValue) {
	l.rev, l.seen, l.holder, l.holding = rev, time.Now(), v, true
}

// renew extends a held lease; false: it was taken over, or it could not be
// renewed for so long that it may be. A renewal the bucket did not answer
// (its leader being elected, or handed over: leadersAway) leaves the lease
// held until three quarters of its duration since the last renewal: the
// others take it only once they saw it unchanged for a whole duration.
// Stepping down at the first unanswered renewal made writers change hands
// for nothing.
func (l *lease) renew(ctx context.Context) bool {
	rev, err := l.kv.Update(ctx, leaseKey, mustJSON(l.holder), l.rev)
	if err == nil {
		l.rev, l.seen = rev, time.Now()
		return true
	}
	if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) && time.Since(l.seen) < l.ttl*3/4 {
		return true
	}
	l.holding = false
	return false
}

// release gives a held lease up at once (a server that stops), so that
// another takes over without waiting for it to lapse. The key keeps the
// epoch, with no owner: the next holder's is above it whatever its replica
// applied (a deleted key made a lagging server's next epoch one the log
// already held).
func (l *lease) release(ctx context.Context) {
	if l.holding {
		_, _ = l.kv.Update(ctx, leaseKey, mustJSON(leaseValue{Epoch: l.holder.Epoch}), l.rev)
		l.holding = false
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
