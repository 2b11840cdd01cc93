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
	// workers are the leases this server pushed to each worker and that have
	// not ended, to tell when one lapsed (see lapsedSince).
	workers map[workerKey]*pushedLeases
}

type leaseRun struct{ ns, runID string }

// workerKey names a worker of a namespace (its lease-owner name).
type workerKey struct{ ns, name string }

// pushedLeases are the live leases this server pushed to one worker, and when
// the last of them lapsed: expired without an extension or an end seen here.
// A worker whose lease lapsed did not heartbeat for a whole lease (frozen,
// paused, cut off): its claim streams must not be handed more runs, least of
// all the one whose lease it let lapse (docs/worker-protocol.md, Fencing).
type pushedLeases struct {
	live map[leaseRun]int64 // the token of each lease not known ended
	// checkAt is when the earliest of live expired, as last scanned: leases
	// are only extended, so no lease lapses before it. Zero when none was.
	checkAt  time.Time
	lapsedAt time.Time // the expiry of the lease that lapsed last
	streams  int       // claim streams of the worker open here
}

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
	// worker is the worker this server pushed the lease to ("" for a lease
	// first seen in a heartbeat): its pushedLeases track it until it ends.
	worker string
}

const minLeasePrune = 1024

// endedKept is how long an ended lease's entry stays at the least, for the
// heartbeats in flight when it ended.
const endedKept = time.Minute

func newLeaseCounter(now func() time.Time) *leaseCounter {
	return &leaseCounter{now: now, held: map[leaseRun]heldLease{}, pruneAt: minLeasePrune,
		workers: map[workerKey]*pushedLeases{}}
}

// set records the entry of k; lc.mu is held. An entry of another token
// replaces a lease that either ended or lapsed: when it had not ended, its
// worker let it lapse (the run was claimed again through this server).
func (lc *leaseCounter) set(k leaseRun, h heldLease) {
	if old, ok := lc.held[k]; ok {
		if !old.ended {
			lc.live--
		}
		if old.worker != "" && (old.token != h.token || h.ended) {
			lc.untrack(k, old, !old.ended && old.token != h.token)
		}
	}
	if !h.ended {
		lc.live++
	}
	lc.held[k] = h
}

// untrack stops tracking lease h of k in its worker's leases, as lapsed when
// lapsed; lc.mu is held.
func (lc *leaseCounter) untrack(k leaseRun, h heldLease, lapsed bool) {
	wk := workerKey{k.ns, h.worker}
	wl := lc.workers[wk]
	if wl == nil || wl.live[k] != h.token {
		return
	}
	delete(wl.live, k)
	if lapsed && h.expires.After(wl.lapsedAt) {
		wl.lapsedAt = h.expires
	}
	lc.dropWorker(wk, wl)
}

// dropWorker forgets a worker without live leases nor open streams.
func (lc *leaseCounter) dropWorker(wk workerKey, wl *pushedLeases) {
	if len(wl.live) == 0 && wl.streams == 0 {
		delete(lc.workers, wk)
	}
}

// granted counts the leases of runs pushed to worker.
func (lc *leaseCounter) granted(runs []*store.ClaimedRun, worker string) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for _, cr := range runs {
		k := leaseRun{cr.Run.Namespace, cr.Run.ID}
		lc.set(k, heldLease{token: cr.LeaseToken, expires: cr.LeaseExpiresAt, workflow: cr.Run.Workflow, worker: worker})
		if worker == "" {
			continue
		}
		wk := workerKey{k.ns, worker}
		wl := lc.workers[wk]
		if wl == nil {
			wl = &pushedLeases{live: map[leaseRun]int64{}, checkAt: cr.LeaseExpiresAt}
			lc.workers[wk] = wl
		}
		wl.live[k] = cr.LeaseToken
		if wl.checkAt.IsZero() || cr.LeaseExpiresAt.Before(wl.checkAt) { // zero: none live at the last scan
			wl.checkAt = cr.LeaseExpiresAt
		}
	}
	lc.maybePrune()
}

// relapsed reports whether one of runs, just claimed for worker by a stream
// opened at since, was leased to the same worker through this server, and
// that lease neither ended nor expired before since: the worker let it lapse
// while the stream was open, and the claim would hand the run back down the
// stream that let it go. (A lease that lapsed before the stream opened is the
// worker's to take again: it has connected since.)
func (lc *leaseCounter) relapsed(runs []*store.ClaimedRun, worker string, since time.Time) bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for _, cr := range runs {
		h, ok := lc.held[leaseRun{cr.Run.Namespace, cr.Run.ID}]
		if ok && !h.ended && h.worker == worker && h.token != cr.LeaseToken && h.expires.After(since) {
			return true
		}
	}
	return false
}

// openStream registers a claim stream of worker in namespace ns and returns
// the function that unregisters it.
func (lc *leaseCounter) openStream(ns, worker string) (closeStream func()) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	wk := workerKey{ns, worker}
	wl := lc.workers[wk]
	if wl == nil {
		wl = &pushedLeases{live: map[leaseRun]int64{}}
		lc.workers[wk] = wl
	}
	wl.streams++
	return func() {
		lc.mu.Lock()
		defer lc.mu.Unlock()
		if wl := lc.workers[wk]; wl != nil {
			wl.streams--
			lc.dropWorker(wk, wl)
		}
	}
}

// lapsedSince reports whether a lease this server pushed to worker in
// namespace ns lapsed (expired without an extension or an end seen here)
// after since. It scans the worker's leases only once the earliest of them
// may have expired, so that the check costs a map lookup on the claim path.
func (lc *leaseCounter) lapsedSince(ns, worker string, since time.Time) bool {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	wl := lc.workers[workerKey{ns, worker}]
	if wl == nil {
		return false
	}
	if now := lc.now(); !now.Before(wl.checkAt) {
		wl.scan(lc, now)
	}
	return wl.lapsedAt.After(since)
}

// lapsingIn reports how long until the earliest lease this server pushed to
// worker in namespace ns expires, when that is within d and no extension has
// been seen: zero when none does. A claim stream waits that long rather than
// claim, so that the claim does not take the run of a lease about to lapse
// back for a worker that let it lapse (the store's expiry would pass between
// the stream's check and its claim; relapsed hands such a run back, but its
// claim is counted in the run's attempts).
func (lc *leaseCounter) lapsingIn(ns, worker string, d time.Duration) time.Duration {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	wl := lc.workers[workerKey{ns, worker}]
	if wl == nil || len(wl.live) == 0 {
		return 0
	}
	now := lc.now()
	if horizon := now.Add(d); !horizon.Before(wl.checkAt) {
		wl.scan(lc, now)
		if !wl.checkAt.IsZero() && !horizon.Before(wl.checkAt) {
			return wl.checkAt.Sub(now)
		}
	}
	return 0
}

// scan drops the leases of wl that ended or lapsed by now, recording the
// last lapse, and sets checkAt to the earliest expiry of the rest (zero when
// none is left); lc.mu is held.
func (wl *pushedLeases) scan(lc *leaseCounter, now time.Time) {
	var next time.Time
	for k, token := range wl.live {
		h, ok := lc.held[k]
		switch {
		case !ok || h.token != token || h.ended:
			delete(wl.live, k) // ended (or replaced, counted then)
		case !h.expires.After(now):
			delete(wl.live, k)
			if h.expires.After(wl.lapsedAt) {
				wl.lapsedAt = h.expires
			}
		case next.IsZero() || h.expires.Before(next):
			next = h.expires
		}
	}
	wl.checkAt = next
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
		wf, worker := "", ""
		if ok && h.token == l.Token {
			wf, worker = h.workflow, h.worker
		}
		lc.set(k, heldLease{token: l.Token, expires: until, workflow: wf, worker: worker})
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
	lc.set(k, heldLease{token: h.token, ended: true, expires: expires, workflow: h.workflow, worker: h.worker})
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
			if h.worker != "" {
				lc.untrack(k, h, !h.ended)
			}
			delete(lc.held, k)
		}
	}
	lc.pruneAt = max(minLeasePrune, 2*len(lc.held))
}
