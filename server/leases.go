package server

import (
	"slices"
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
	held map[leaseRun]heldLease // the leases seen, and for a while those ended
	live int                    // the entries of held not ended
	// pruneAt is the size at which adding a lease first drops the expired
	// entries (those of workers that vanished, and the ended ones), so that
	// the map stays bounded whether or not anyone scrapes the metrics.
	pruneAt int
}

type leaseRun struct{ ns, runID string }

type heldLease struct {
	token   int64
	expires time.Time
	// workflow is the run's, known when this server pushed the run (not for
	// a lease first seen in a heartbeat): its metrics' label.
	workflow string
	// ended: released, ended by a checkpoint, or lost. The entry stays until
	// it expires: a heartbeat that the store applied before the checkpoint
	// that ended the lease may return after it, and must not count the lease
	// again.
	ended bool
}

const minLeasePrune = 1024

// endedKept is how long an ended lease's entry stays at the least, for the
// heartbeats in flight when it ended.
const endedKept = time.Minute

func newLeaseCounter(now func() time.Time) *leaseCounter {
	return &leaseCounter{now: now, held: map[leaseRun]heldLease{}, pruneAt: minLeasePrune}
}

// set records the entry of k; lc.mu is held.
func (lc *leaseCounter) set(k leaseRun, h heldLease) {
	if old, ok := lc.held[k]; ok && !old.ended {
		lc.live--
	}
	if !h.ended {
		lc.live++
	}
	lc.held[k] = h
}

// granted counts the leases of runs pushed to a worker.
func (lc *leaseCounter) granted(runs []*store.ClaimedRun) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for _, cr := range runs {
		lc.set(leaseRun{cr.Run.Namespace, cr.Run.ID}, heldLease{token: cr.LeaseToken, expires: cr.LeaseExpiresAt, workflow: cr.Run.Workflow})
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
		if slices.Contains(lost, l.RunID) {
			lc.endLocked(k, l.Token)
			continue
		}
		h, ok := lc.held[k]
		if ok && (h.token > l.Token || h.ended && h.token == l.Token) {
			// A late heartbeat of a lease that ended, or of an older lease
			// of a run claimed again since (tokens only grow).
			continue
		}
		wf := ""
		if ok && h.token == l.Token {
			wf = h.workflow
		}
		lc.set(k, heldLease{token: l.Token, expires: until, workflow: wf})
	}
	lc.maybePrune()
}

// ended stops counting a lease: released, ended by a checkpoint, or lost.
func (lc *leaseCounter) ended(l store.Lease) {
	lc.wrote(l, true)
}

// wrote notes a write of lease l through this server (a checkpoint or a
// release), which ends the lease when ends. It returns the run's workflow
// ("" when this server does not know it), and whether this write ended a
// lease not ended before (a retry of an applied release does not).
func (lc *leaseCounter) wrote(l store.Lease, ends bool) (workflow string, ended bool) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	k := leaseRun{l.Namespace, l.RunID}
	h, ok := lc.held[k]
	if ok && h.token != l.Token {
		return "", ends // another lease of the run: not this one to end
	}
	if ends && !h.ended {
		h.token = l.Token
		lc.endEntry(k, h)
		return h.workflow, true
	}
	return h.workflow, false
}

// endLocked ends the lease of k with token, unless k holds another lease (an
// older or newer token is not this lease).
func (lc *leaseCounter) endLocked(k leaseRun, token int64) {
	h, ok := lc.held[k]
	if ok && h.token != token {
		return
	}
	h.token = token
	lc.endEntry(k, h)
}

// endEntry marks the entry h of k ended; lc.mu is held.
func (lc *leaseCounter) endEntry(k leaseRun, h heldLease) {
	expires := lc.now().Add(endedKept)
	if h.expires.After(expires) {
		expires = h.expires
	}
	lc.set(k, heldLease{token: h.token, ended: true, expires: expires, workflow: h.workflow})
}

// learned records the workflow of the run of lease l, read from the store.
func (lc *leaseCounter) learned(l store.Lease, workflow string) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	k := leaseRun{l.Namespace, l.RunID}
	if h, ok := lc.held[k]; ok && h.token == l.Token {
		h.workflow = workflow
		lc.held[k] = h
	}
}

// count returns the leases held and not expired, dropping the expired entries.
func (lc *leaseCounter) count() int {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	lc.prune()
	return lc.live
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
			if !h.ended {
				lc.live--
			}
			delete(lc.held, k)
		}
	}
	lc.pruneAt = max(minLeasePrune, 2*len(lc.held))
}
