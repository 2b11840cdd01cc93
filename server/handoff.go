package server

import (
	"runtime"
	"slices"
	"sync"

	"github.com/trellis-dev/trellis/internal/handoff"
	"github.com/trellis-dev/trellis/store"
)

// handoffs hands runs started through this server's API to the claim streams of
// this server that wait with free credit: the run is created already claimed by
// the stream's worker (store.RunCreateParams.Claim) and pushed on the stream, so
// it costs no claim write and starts without a claim round trip. A stream offers
// its credit only while it waits after a claim that found fewer due runs than it
// asked for: while runs wait in the store, claims take them in their order.
// Other servers' streams are not offered anything; their runs are claimed as
// usual.
type handoffs struct {
	store   store.Store
	mu      sync.Mutex
	streams []*claimStream
	handed  func() // counts a run handed off (metrics); may be nil
}

// claimStream is the hand-off side of one waiting claim stream. Its counters
// are guarded by handoffs.mu.
type claimStream struct {
	h         *handoffs
	ns        string
	queues    []string // empty: every queue
	workflows []string
	versions  map[string][]int // the versions served to pinned runs, by workflow
	claim     store.CreateClaim
	offered   int  // credit a create may reserve
	inflight  int  // reserved by creates that have not ended
	closed    bool // the stream has ended: no more reservations or deliveries
	// runs holds runs created claimed for the stream and not yet sent; it never
	// fills: its capacity is the stream's whole credit.
	runs chan *store.ClaimedRun
	// wake tells the stream that a reservation ended without a run.
	wake chan struct{}
}

// open registers a claim stream of credit at most maxCredit, offering nothing
// yet.
func (h *handoffs) open(p *store.RunsClaimParams, maxCredit int) *claimStream {
	cs := &claimStream{h: h, ns: p.Namespace, queues: p.Queues, workflows: p.Workflows, versions: p.Versions,
		claim: store.CreateClaim{Worker: p.Worker, LeaseDuration: p.LeaseDuration},
		runs:  make(chan *store.ClaimedRun, maxCredit), wake: make(chan struct{}, 1)}
	h.mu.Lock()
	h.streams = append(h.streams, cs)
	h.mu.Unlock()
	return cs
}

// Reserve implements handoff.Offer: it takes a slot of the stream that offers
// the most for the run's namespace, workflow, queue and pinned version.
func (h *handoffs) Reserve(ns, workflow, queue string, pin int) handoff.Slot {
	h.mu.Lock()
	defer h.mu.Unlock()
	var best *claimStream
	for _, cs := range h.streams {
		if cs.offered > 0 && cs.ns == ns && (best == nil || cs.offered > best.offered) &&
			slices.Contains(cs.workflows, workflow) && (len(cs.queues) == 0 || slices.Contains(cs.queues, queue)) &&
			(pin == 0 || slices.Contains(cs.versions[workflow], pin)) {
			best = cs
		}
	}
	if best == nil {
		return nil
	}
	best.offered--
	best.inflight++
	return best
}

// Claim implements handoff.Slot.
func (cs *claimStream) Claim() *store.CreateClaim {
	c := cs.claim
	return &c
}

// Done implements handoff.Slot.
func (cs *claimStream) Done(cr *store.ClaimedRun) {
	h := cs.h
	h.mu.Lock()
	cs.inflight--
	switch {
	case cs.closed:
	case cr != nil:
		cs.runs <- cr
		last := cs.inflight == 0
		h.mu.Unlock()
		if h.handed != nil {
			h.handed()
		}
		if last { // no other create of this stream under way: send it now
			yieldToWoken()
		}
		return
	default:
		cs.offered++
		select {
		case cs.wake <- struct{}{}:
		default:
		}
	}
	h.mu.Unlock()
	if cr != nil {
		// The stream ended while the run was being created.
		releaseClaimed(h.store, cr)
	}
}

// yieldToWoken lets the goroutine that a hand-over has just made runnable (the
// claim stream a run was handed to, the long poll waiting for a run that
// ended) run before the rest of the caller's request: runtime.Gosched puts the
// caller on the global queue, and the woken goroutine, next on this thread's
// queue, runs at once. Without it the woken goroutine waited for the caller to
// finish its request (its answer written) or for another thread to wake and
// take it, about 50 µs on the 2-core test machine, each time on the way of a
// run started and awaited through the server (w3): the push to the worker and
// the result's answer. Callers yield only for a lone hand-over (the last
// create under way for a stream; a checkpoint call of one run while the server
// serves no other): under load the woken goroutines find a thread anyway, and
// a yield per run cost w1 through a server 1.5% (SQLite) to 5% (Postgres) of
// its rate (docs/benchmarks.md, "A run through a server, hop by hop").
func yieldToWoken() { runtime.Gosched() }

// withdraw takes back the credit the stream offered and no create reserved.
func (cs *claimStream) withdraw() int {
	cs.h.mu.Lock()
	defer cs.h.mu.Unlock()
	n := cs.offered
	cs.offered = 0
	return n
}

// offer offers credit to creates. It reports false, and ends the stream's
// hand-offs, when there is nothing left to wait for: no credit, no create
// holding a slot and no run to send.
func (cs *claimStream) offer(credit int) bool {
	cs.h.mu.Lock()
	defer cs.h.mu.Unlock()
	if credit == 0 && cs.offered == 0 && cs.inflight == 0 && len(cs.runs) == 0 {
		cs.closeLocked()
		return false
	}
	cs.offered += credit
	return true
}

// close ends the stream's hand-offs and returns the runs delivered to it and not
// yet sent.
func (cs *claimStream) close() []*store.ClaimedRun {
	cs.h.mu.Lock()
	defer cs.h.mu.Unlock()
	cs.closeLocked()
	var left []*store.ClaimedRun
	for len(cs.runs) > 0 {
		left = append(left, <-cs.runs)
	}
	return left
}

func (cs *claimStream) closeLocked() {
	if cs.closed {
		return
	}
	cs.closed = true
	cs.offered = 0
	h := cs.h
	if i := slices.Index(h.streams, cs); i >= 0 {
		h.streams = slices.Delete(h.streams, i, i+1)
	}
}

// take returns first and the other runs delivered and not yet sent, without
// waiting.
func (cs *claimStream) take(first *store.ClaimedRun) []*store.ClaimedRun {
	runs := []*store.ClaimedRun{first}
	for {
		select {
		case cr := <-cs.runs:
			runs = append(runs, cr)
		default:
			return runs
		}
	}
}
