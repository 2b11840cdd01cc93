package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/trellis-dev/trellis/internal/protocol"
	"github.com/trellis-dev/trellis/store"
)

// leaseHistories keeps, for each lease a remote worker writes through this
// server, what its run's history holds (protocol.Recorded), so that checking
// a checkpoint against the protocol (protocol.Check: no recorded op rewritten,
// no position far ahead) costs no store read: the record is made from the
// history a claim pushes to the worker and follows the checkpoints the store
// applies. A lease first seen in a write (its claim came through another
// server, or this one restarted or dropped the entry) reads the run's history
// once; so does a write whose seq says that earlier writes of the lease went
// through another server, and every unguarded write (seq 0). Two writes of one
// lease sent at once through two servers are each checked against what their
// server knew (a worker makes one write at a time per lease: seq).
//
// Entries end with their lease (a checkpoint that leaves the run in another
// state than running, a release) or, for a worker that vanished, when they
// have not been used for a while after their lease's expiry: the map is pruned
// when it doubles, as leaseCounter's is.
type leaseHistories struct {
	now     func() time.Time
	mu      sync.Mutex
	m       map[leaseRun]*leaseHistory
	pruneAt int
	// endings counts, by run, the checkpoints being written that end a run
	// whose claim this server pushed (see ending).
	endings map[leaseRun]int
}

// leaseHistory is the record of one lease; mu makes the writes of the lease
// one at a time (a worker makes them one at a time anyway: seq).
type leaseHistory struct {
	mu    sync.Mutex
	token int64
	// seq is the seq of the lease's last write applied through this server
	// (0: none, or unguarded writes only).
	seq     int64
	rec     *protocol.Recorded // nil: not known yet (read from the store)
	expires time.Time          // guarded by leaseHistories.mu
	// runSeq is the run's sequence, from the claim this server pushed (0:
	// not known): the lease's writes carry it to the store as a hint
	// (store.Lease.RunSeq), which then finds the run without looking its
	// ID up. A run's sequence never changes.
	runSeq int64
	// run is the run as the claim this server pushed left it (nil: not
	// known): a checkpoint that ends the run hands what it left
	// (store.FinalRun) to those waiting for it through this server.
	run *store.Run
	// leaseExpires is when the pushed claim's lease expired, as the claim
	// said: past it, the run may have been claimed and ended through
	// another server (its worker vanished), so isPushed no longer vouches
	// for it.
	leaseExpires time.Time
	// stale: a later lease of the run came through this server (its claim
	// was pushed here), so this lease's writes are refused as lost before
	// its protocol is checked (see check).
	stale bool
}

// historyKept is how long an entry stays after its last use at the least.
const historyKept = time.Minute

func newLeaseHistories(now func() time.Time) *leaseHistories {
	return &leaseHistories{now: now, m: map[leaseRun]*leaseHistory{}, pruneAt: minLeasePrune, endings: map[leaseRun]int{}}
}

// pushed records the histories of runs claimed for a worker.
func (lh *leaseHistories) pushed(runs []*store.ClaimedRun) {
	lh.mu.Lock()
	defer lh.mu.Unlock()
	for _, cr := range runs {
		lh.m[leaseRun{cr.Run.Namespace, cr.Run.ID}] = &leaseHistory{token: cr.LeaseToken, runSeq: cr.Run.Sequence, run: cr.Run,
			rec: protocol.NewRecorded(cr.History, cr.Run.CancelRequested), expires: later(cr.LeaseExpiresAt, lh.now().Add(historyKept)),
			leaseExpires: cr.LeaseExpiresAt}
	}
	lh.maybePrune()
}

// acquire returns the entry of lease l, locked: the caller unlocks it. A new
// lease of the run replaces an older one's entry.
func (lh *leaseHistories) acquire(l store.Lease) *leaseHistory {
	lh.mu.Lock()
	k := leaseRun{l.Namespace, l.RunID}
	e := lh.m[k]
	if e == nil || e.token != l.Token {
		if e != nil && e.token > l.Token { // a stale lease's write: refused (check)
			lh.mu.Unlock()
			e = &leaseHistory{token: l.Token, stale: true}
			e.mu.Lock() // the caller unlocks it
			return e
		}
		e = &leaseHistory{token: l.Token}
		lh.m[k] = e
		lh.maybePrune()
	}
	e.expires = later(e.expires, lh.now().Add(historyKept))
	lh.mu.Unlock()
	e.mu.Lock()
	return e
}

// ending marks run l's checkpoint p, about to be written, as ending the run
// when it does (a status other than running) and the claim this server pushed
// is known (e.run): until done is called, the results watchers leave the
// store's reports of the run to done (servercore.Config.Executing), which
// hands the run as p left it (store.FinalRun) to those waiting for it, or has
// it read again. It returns nil otherwise. e is the lease's entry, locked.
func (lh *leaseHistories) ending(e *leaseHistory, p *store.CheckpointParams, ended func(final *store.Run)) (done func(res *store.CheckpointResult, err error)) {
	if e.run == nil || p.Status == store.StatusRunning {
		return nil
	}
	k := leaseRun{p.Lease.Namespace, p.Lease.RunID}
	lh.mu.Lock()
	lh.endings[k]++
	lh.mu.Unlock()
	return func(res *store.CheckpointResult, err error) {
		var final *store.Run
		// A failed run may have become a workflow retry, or recorded its
		// attempt; a replayed write's outcome is the first one's: read.
		if err == nil && res != nil && !res.Replayed && p.Status == store.StatusSucceeded {
			final = store.FinalRun(e.run, p, res)
		}
		ended(final) // before the mark goes: a report read after it finds no waiter
		lh.mu.Lock()
		if lh.endings[k]--; lh.endings[k] <= 0 {
			delete(lh.endings, k)
		}
		lh.mu.Unlock()
	}
}

// isEnding reports whether a checkpoint that ends run id of namespace ns is
// being written through this server (ending).
func (lh *leaseHistories) isEnding(ns, id string) bool {
	lh.mu.Lock()
	defer lh.mu.Unlock()
	return lh.endings[leaseRun{ns, id}] > 0
}

// isPushed reports whether run id of namespace ns holds a lease this server
// pushed (the entry knows the run as the claim left it), within the lease the
// claim gave, and whose end has not been written through it: the checkpoint
// that ends it drops the entry (workerService.wrote) before ending's done
// hands the run to the results watchers (servercore.Config.Pushed), which do
// not read a run pushed here as a caller registers for it. Past the claim's
// lease the run may have lapsed, been claimed through another server and
// ended there, its report gone by before the caller came: the entry stays
// (until pruned) and said pushed, and a caller of two servers on one Postgres
// waited for such a run until its deadline (TestTwoServersOnePostgresProcesses).
// A lease extended past it is read as any other run then: one read.
func (lh *leaseHistories) isPushed(ns, id string) bool {
	lh.mu.Lock()
	defer lh.mu.Unlock()
	e := lh.m[leaseRun{ns, id}]
	return e != nil && e.run != nil && lh.now().Before(e.leaseExpires)
}

// drop forgets the entry of lease l (its lease ended).
func (lh *leaseHistories) drop(l store.Lease) {
	lh.mu.Lock()
	defer lh.mu.Unlock()
	k := leaseRun{l.Namespace, l.RunID}
	if e := lh.m[k]; e != nil && e.token == l.Token {
		delete(lh.m, k)
	}
}

func (lh *leaseHistories) maybePrune() {
	if len(lh.m) < lh.pruneAt {
		return
	}
	now := lh.now()
	for k, e := range lh.m {
		if !e.expires.After(now) {
			delete(lh.m, k)
		}
	}
	lh.pruneAt = max(minLeasePrune, 2*len(lh.m))
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// check checks checkpoint p (the lease's write seq) against the protocol and
// the run's history, reading the history from st when this entry does not
// know it or may be behind. A retry of a write applied already (seq at or
// below the last applied) is not checked: the store answers it as applied,
// or refuses it when it differs; one whose application this record did not
// see (through another server, or before a restart) finds its ops recorded
// as they are, which the rules accept (an identical op again).
//
// A write of a stale lease is refused as lost (store.ErrLeaseLost, as the
// store would refuse it) without a check: checked against the history the
// later lease wrote, a worker that was frozen past its lease and woke up was
// told its write broke the protocol (invalid_argument, "rewrites the op
// recorded there"), which says the worker is wrong, not late.
func (e *leaseHistory) check(ctx context.Context, st store.Store, p *store.CheckpointParams, seq int64) error {
	if e.stale {
		return fmt.Errorf("%w: run %q: a later claim of the run holds its lease", store.ErrLeaseLost, p.Lease.RunID)
	}
	if seq > 0 && seq <= e.seq || !protocol.Checked() {
		return nil
	}
	// Read the history when this record may be behind the store: not known
	// here, a write whose seq says earlier ones went through another server,
	// or an unguarded write (seq 0), which says nothing of the writes before it.
	if e.rec == nil || seq != e.seq+1 {
		ops, err := st.HistoryList(ctx, &store.HistoryListParams{Namespace: p.Lease.Namespace, Ref: p.Lease.RunID})
		if err != nil {
			return err
		}
		e.rec = protocol.NewRecorded(ops, false)
	}
	if p.Status == store.StatusCancelled && !e.rec.CancelRequested {
		// Requested since the claim, or not known here: the run says.
		run, err := st.RunGet(ctx, &store.RunGetParams{Namespace: p.Lease.Namespace, Ref: p.Lease.RunID, OmitLarge: true})
		if err != nil {
			return err
		}
		e.rec.CancelRequested = run.CancelRequested
	}
	return protocol.Check(p, e.rec)
}

// applied records checkpoint p (seq) as written.
func (e *leaseHistory) applied(p *store.CheckpointParams, seq int64, cancelRequested bool) {
	if e.rec != nil {
		e.rec.Apply(p)
		e.rec.CancelRequested = e.rec.CancelRequested || cancelRequested
	}
	if seq > 0 {
		e.seq = seq
	}
}
