package server

import (
	"sync"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// leaseCounter counts the leases this server's remote workers hold through it,
// for trellis_active_leases: a lease counts from the claim that pushed it to a
// worker of this server (or from a heartbeat, ExtendLeases, that extended it
// here: a worker that reconnected from another server) until its run is
// released (ReleaseLease, a checkpoint that leaves the run in any state but
// running), reported lost, or its expiry passes without an extension through
// this server. The store is not read: the count is what this server saw.
type leaseCounter struct {
	now  func() time.Time
	mu   sync.Mutex
	held map[leaseRun]heldLease
	// pruneAt is the size at which adding a lease first drops the expired
	// ones (those of workers that vanished), so that the map stays bounded
	// whether or not anyone scrapes the metrics.
	pruneAt int
	// recentEnds and olderEnds hold the leases ended lately (run → token): a
	// heartbeat that the store applied before the checkpoint that ended the
	// lease may return after it, and must not count the lease again. When
	// recentEnds fills (maxEnded), it becomes olderEnds: an extension in flight
	// takes milliseconds, the last maxEnded to 2*maxEnded ends are enough.
	recentEnds, olderEnds map[leaseRun]int64
}

const maxEnded = 4096

type leaseRun struct{ ns, runID string }

type heldLease struct {
	token   int64
	expires time.Time
}

const minLeasePrune = 1024

func newLeaseCounter(now func() time.Time) *leaseCounter {
	return &leaseCounter{now: now, held: map[leaseRun]heldLease{}, pruneAt: minLeasePrune,
		recentEnds: map[leaseRun]int64{}}
}

// granted counts the leases of runs pushed to a worker.
func (lc *leaseCounter) granted(runs []*store.ClaimedRun) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for _, cr := range runs {
		lc.held[leaseRun{cr.Run.Namespace, cr.Run.ID}] = heldLease{token: cr.LeaseToken, expires: cr.LeaseExpiresAt}
	}
	lc.maybePrune()
}

// extended records leases extended until until, but for the runs in lost,
// whose leases end.
func (lc *leaseCounter) extended(leases []store.Lease, lost []string, until time.Time) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for _, l := range leases {
		k := leaseRun{l.Namespace, l.RunID}
		if containsString(lost, l.RunID) {
			lc.endLocked(k, l.Token)
			continue
		}
		if t, ok := lc.recentEnds[k]; ok && t == l.Token {
			continue
		}
		if t, ok := lc.olderEnds[k]; ok && t == l.Token {
			continue
		}
		lc.held[k] = heldLease{token: l.Token, expires: until}
	}
	lc.maybePrune()
}

// ended stops counting a lease: released, ended by a checkpoint, or lost.
func (lc *leaseCounter) ended(l store.Lease) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	lc.endLocked(leaseRun{l.Namespace, l.RunID}, l.Token)
}

func (lc *leaseCounter) endLocked(k leaseRun, token int64) {
	if h, ok := lc.held[k]; ok && h.token == token {
		delete(lc.held, k)
	}
	if len(lc.recentEnds) >= maxEnded {
		lc.olderEnds, lc.recentEnds = lc.recentEnds, make(map[leaseRun]int64, maxEnded)
	}
	lc.recentEnds[k] = token
}

// count returns the leases held and not expired, dropping the expired ones.
func (lc *leaseCounter) count() int {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	lc.prune()
	return len(lc.held)
}

func (lc *leaseCounter) maybePrune() {
	if len(lc.held) >= lc.pruneAt {
		lc.prune()
	}
}

func (lc *leaseCounter) prune() {
	now := lc.now()
	for k, h := range lc.held {
		if !h.expires.After(now) {
			delete(lc.held, k)
		}
	}
	lc.pruneAt = max(minLeasePrune, 2*len(lc.held))
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
