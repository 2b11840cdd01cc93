package worker

import (
	"context"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// claimLoop claims runs whenever there may be some and a slot is free, and sleeps
// until a push (ready topic, wake) or the next due time otherwise.
func (w *Worker) claimLoop() {
	defer w.loops.Done()
	ready, unsubscribe, err := w.cfg.Store.Subscribe(w.hardCtx, store.TopicReady)
	if err != nil { // claims still happen at each poll
		w.cfg.Logger.Warn("subscribing to wake-ups; polling only", "err", err)
		ready, unsubscribe = nil, func() {}
	}
	defer unsubscribe()
	timer := w.cfg.Clock.NewTimer(0)
	defer timer.Stop()
	force := true // the first claim, and claims on the timer, take any free slot
	for !w.stopped() {
		next, again := w.claimOnce(force)
		if again {
			continue
		}
		wait := w.cfg.PollInterval
		if next != nil {
			wait = min(wait, max(next.Sub(w.cfg.Clock.Now()), 0))
		}
		timer.Reset(wait)
		force = false
		select {
		case <-ready:
		case <-w.wake:
		case <-timer.C():
			force = true
		case <-w.stopping:
		}
		timer.Stop()
	}
}

// claimOnce claims as many runs as there are free slots (up to ClaimBatch) and
// starts them. It returns the next due time and whether to claim again at once.
// Unless forced, it does not claim while runs wait in the store (backlog) and
// fewer than refillAt slots are free: the runs finishing meanwhile free more, and
// one claim then fills them all.
func (w *Worker) claimOnce(force bool) (next *time.Time, again bool) {
	free := w.cfg.Concurrency - w.Active()
	names := w.sortedWorkflows()
	w.updateRecord(names)
	if free <= 0 || len(names) == 0 || (!force && free < w.refillAt() && w.hasBacklog()) {
		if free < w.refillAt() {
			// Woken with too few free slots (a run became due): finish wakes
			// the loop again once refillAt slots are free. A run that finished
			// since free was read did not see wantMore: count again.
			if w.wantMoreFree() >= w.refillAt() && len(names) > 0 {
				return nil, true
			}
		}
		return nil, false
	}
	n := min(free, w.cfg.ClaimBatch)
	ctx, cancel := context.WithTimeout(w.hardCtx, w.cfg.LeaseDuration)
	defer cancel()
	var t0 time.Time
	if w.cfg.OnClaim != nil {
		t0 = time.Now() // wall time: a latency
	}
	gen0 := w.cancelGen.Load()
	res, err := w.cfg.Store.RunsClaim(ctx, &store.RunsClaimParams{
		Namespace: w.cfg.Namespace, Queues: w.cfg.Queues, Workflows: names, Versions: w.versions(),
		Worker: w.cfg.Name, Max: n, LeaseDuration: w.cfg.LeaseDuration, StepTimeoutGrace: w.cfg.StepTimeoutGrace,
	})
	if w.cfg.OnClaim != nil && err == nil {
		w.cfg.OnClaim(time.Since(t0), len(res.Runs))
	}
	if w.cfg.OnEndedAttempts != nil && err == nil && len(res.EndedAttempts) > 0 {
		w.cfg.OnEndedAttempts(res.EndedAttempts)
	}
	if err != nil {
		if !w.stopped() {
			w.cfg.Logger.Error("claiming runs", "err", err)
		}
		w.mu.Lock()
		w.backlog = true // unknown: let the claim loop keep the order
		w.mu.Unlock()
		retry := w.cfg.Clock.Now().Add(time.Second)
		return &retry, false
	}
	if len(res.Runs) > 0 {
		w.cfg.Logger.Debug("claimed runs", "worker", w.cfg.Name, "runs", len(res.Runs))
	}
	for _, cr := range res.Runs {
		w.launch(cr)
	}
	if len(res.Runs) > 0 {
		w.claimedSince(gen0)
	}
	full := len(res.Runs) == n
	w.mu.Lock()
	w.wantMore = full && n == free
	w.backlog = full
	// Runs that finished while this claim ran read the old wantMore (false
	// after a claim that was not full, or at the first one) and woke nobody:
	// count the slots they freed.
	freeNow := w.cfg.Concurrency - w.activeLocked()
	w.mu.Unlock()
	return res.NextDue, full && (n < free || freeNow >= w.refillAt())
}

func (w *Worker) launch(cr *store.ClaimedRun) {
	ctl := &Control{
		Lease:     cr.Lease(),
		cancelReq: make(chan struct{}),
	}
	if cr.Run.CancelRequested {
		ctl.RequestCancel()
	}
	ctx, cancel := context.WithCancelCause(w.hardCtx)
	ctl.lost = cancel
	if !cr.LeaseExpiresAt.IsZero() {
		ctl.expires.Store(cr.LeaseExpiresAt.UnixNano())
	}
	a := &active{ctl: ctl, cancel: cancel, run: cr.Run}
	ctl.held = func(ctx context.Context) bool { return w.leaseHeld(ctx, a) }
	run := func() {
		defer w.finish(cr.Run.ID, a)
		if !w.leaseHeld(ctx, a) {
			return
		}
		w.exec.Execute(ctx, cr, ctl)
	}
	w.mu.Lock()
	// A run handed back (a wait its cancellation ended, say) may be claimed
	// again before its previous execution here has returned: the new
	// execution takes the run's entry, and the old one leaves it alone.
	w.active[cr.Run.ID] = a
	closed := w.closed
	// A claim asks for the slots free as it starts; direct dispatches
	// (Reserve) may fill some of them before it returns. The runs it brings
	// beyond Concurrency wait here, leased (heartbeats extend them, a
	// cancellation reaches them), and start in claim order as slots free up
	// (finish). Holding a claim's slots while it ran instead kept every run
	// started meanwhile from being dispatched directly.
	start := closed || w.running < w.cfg.Concurrency
	if start {
		w.running++
	} else {
		w.queued = append(w.queued, run)
	}
	w.mu.Unlock()
	if !start {
		return
	}
	if closed {
		// The worker has stopped (a direct dispatch reserved its slot just
		// before): ctx is done, so the run is handed back at once, here.
		run()
		return
	}
	go run()
}

// leaseHeld reports whether the lease of a run is still held, as a run starts
// and before each step attempt (Control.LeaseHeld). A claim read after its
// lease expired (the worker was frozen, or its connection stalled, while the
// claim waited in it) may already be another worker's: it is dropped rather
// than run again beside that worker; and a run whose lease expired while the
// worker was frozen starts no step before it knows the lease is still its
// own. Clocks differ between the worker and the store, so an expiry that
// looks past is checked with the store (one lease extension) before the run
// is dropped or stopped; the common case costs a clock read.
func (w *Worker) leaseHeld(ctx context.Context, a *active) bool {
	if exp := a.ctl.expires.Load(); exp == 0 || w.cfg.Clock.Now().UnixNano() < exp {
		return true
	}
	sent := w.cfg.Clock.Now()
	ectx, cancel := context.WithTimeout(ctx, w.cfg.HeartbeatInterval)
	defer cancel()
	// With the step the run is executing (one of its async steps, or none),
	// as the heartbeat reports it: the check must not end that step's record.
	res, err := w.cfg.Store.LeasesExtend(ectx, &store.LeasesExtendParams{Leases: []store.Lease{a.ctl.Lease},
		Duration: w.cfg.LeaseDuration, Steps: []store.RunStep{a.ctl.Step()}, StepTimeoutGrace: w.cfg.StepTimeoutGrace})
	if err == nil && len(res.Lost) == 0 {
		a.ctl.extended(sent, w.cfg.LeaseDuration)
		return true
	}
	w.cfg.Logger.Warn("lease expired: the run stops (a claim is dropped before it starts)", "worker", w.cfg.Name,
		"run_id", a.run.ID, "workflow", a.run.Workflow, "run_attempt", a.run.Attempts, "err", err)
	a.cancel(store.ErrLeaseLost)
	return false
}

// finish frees a run's slot and counts its goroutine out, the last thing the
// goroutine does. While runs wait in the store, the claim loop is woken once
// refillAt slots are free: a claim refills them in one batch, and the slots
// freed while it runs wait for the next, so N finishing runs cause about
// N/refillAt claims, not N.
func (w *Worker) finish(runID string, a *active) {
	a.cancel(nil)
	w.mu.Lock()
	if w.active[runID] == a { // else a later execution of the run holds it
		delete(w.active, runID)
	}
	// A run waiting for a slot (see launch) takes this one, in the same
	// critical section that counts this goroutine out: a claim never finds
	// the slot taken by a goroutine that is ending, and Stop never finds the
	// worker idle with runs still waiting.
	w.running--
	var next func()
	if len(w.queued) > 0 && w.running < w.cfg.Concurrency {
		next = w.queued[0]
		w.queued[0] = nil
		w.queued = w.queued[1:]
		w.running++
	}
	if w.running == 0 && w.idle != nil {
		close(w.idle)
		w.idle = nil
	}
	more := w.wantMore && w.cfg.Concurrency-len(w.active)-w.reserved >= w.refillAt()
	w.mu.Unlock()
	if next != nil {
		go next()
	}
	if more {
		w.Wake()
	}
}

// refillAt is how many free slots make a claim worth it while runs wait in
// the store: a quarter of a claim batch (at least one), so that slots stay busy
// (at most refillAt-1 idle until the next finish or poll) and claims stay batched.
func (w *Worker) refillAt() int {
	return max(1, min(w.cfg.ClaimBatch, w.cfg.Concurrency)/4)
}

// wantMoreFree asks finish to wake the claim loop once refillAt slots are free,
// and returns the free slots counted under the same lock, so that a run that
// finished just before is counted and one that finishes after wakes the loop.
func (w *Worker) wantMoreFree() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.wantMore = true
	return w.cfg.Concurrency - w.activeLocked()
}

func (w *Worker) hasBacklog() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.backlog
}

// claimedSince is called after runs claimed since cancellation signal count
// gen0 were launched. A cancellation signalled while they were being claimed
// found them not yet held (the lease extension it caused did not cover them):
// extend the leases again now, which reports it, rather than at the next tick.
func (w *Worker) claimedSince(gen0 uint64) {
	if w.cancelGen.Load() == gen0 {
		return
	}
	select {
	case w.recheck <- struct{}{}:
	default:
	}
}

// heartbeatLoop extends every held lease in one call per interval, stops runs whose
// lease was lost and passes on cancellations. cancels signals a cancellation of a
// run elsewhere (nil: none, the ticks alone): the loop extends the leases then,
// which reports it, rather than at the next tick. It calls unsubscribe as it ends.
func (w *Worker) heartbeatLoop(cancels <-chan struct{}, unsubscribe func()) {
	defer w.loops.Done()
	defer unsubscribe()
	timer := w.cfg.Clock.NewTimer(w.cfg.HeartbeatInterval)
	defer timer.Stop()
	for {
		select {
		case <-timer.C():
			w.heartbeat()
			timer.Reset(w.cfg.HeartbeatInterval)
		case <-cancels:
			w.cancelGen.Add(1)
			ctx, cancel := context.WithTimeout(w.hardCtx, w.cfg.HeartbeatInterval)
			w.extendLeases(ctx)
			cancel()
		case <-w.recheck:
			ctx, cancel := context.WithTimeout(w.hardCtx, w.cfg.HeartbeatInterval)
			w.extendLeases(ctx)
			cancel()
		case <-w.hardCtx.Done():
			return
		}
	}
}

// heartbeat extends the leases the worker holds, then refreshes its record: two
// calls per tick whatever the number of active runs (one statement each on
// Postgres; on SQLite the lease call runs one UPDATE per lease, all in one
// transaction).
func (w *Worker) heartbeat() {
	ctx, cancel := context.WithTimeout(w.hardCtx, w.cfg.HeartbeatInterval)
	defer cancel()
	w.extendLeases(ctx)
	if err := w.writeRecord(ctx, w.sortedWorkflows()); err != nil && w.hardCtx.Err() == nil {
		w.cfg.Logger.Warn("refreshing worker record", "err", err)
	}
}

func (w *Worker) extendLeases(ctx context.Context) {
	w.mu.Lock()
	leases := make([]store.Lease, 0, len(w.active))
	steps := make([]store.RunStep, 0, len(w.active))
	sent := make(map[string]*active, len(w.active))
	running := false
	for id, a := range w.active {
		sent[id] = a
		leases = append(leases, a.ctl.Lease)
		steps = append(steps, a.ctl.Step())
		running = running || steps[len(steps)-1].Name != ""
	}
	w.mu.Unlock()
	if len(leases) == 0 {
		return
	}
	if !running {
		steps = nil // none to report: the call is smaller
	}
	at := w.cfg.Clock.Now()
	res, err := w.cfg.Store.LeasesExtend(ctx, &store.LeasesExtendParams{Leases: leases, Duration: w.cfg.LeaseDuration,
		Steps: steps, StepTimeoutGrace: w.cfg.StepTimeoutGrace})
	if err != nil {
		w.cfg.Logger.Warn("extending leases", "err", err)
		return
	}
	for _, a := range sent {
		a.ctl.extended(at, w.cfg.LeaseDuration)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, id := range res.Lost {
		// Only the execution whose lease was sent lost it: one that claimed
		// the run again meanwhile holds a new lease.
		if a := w.active[id]; a != nil && a == sent[id] {
			w.cfg.Logger.Warn("lease lost: another worker may have taken the run over", "worker", w.cfg.Name,
				"run_id", id, "workflow", a.run.Workflow, "run_attempt", a.run.Attempts)
			a.cancel(store.ErrLeaseLost)
		}
	}
	for _, id := range res.CancelRequested {
		if a := w.active[id]; a != nil {
			a.ctl.RequestCancel()
		}
	}
}

// pushWait is how long one claim stream stays open without runs; a new one
// then opens at once (with the worker's current workflows and free slots).
const pushWait = 30 * time.Second

// pushLoop is the claim loop of a store that pushes claims (Pusher): while the
// worker has free slots, a claim stream with that credit is open and the
// server pushes runs as they become due; no polling. A stream ends when its
// credit is used up, after pushWait, when the server restarts or drains (the
// loop reconnects with backoff), or when the worker stops.
func (w *Worker) pushLoop(p Pusher) {
	defer w.loops.Done()
	ctx, cancel := context.WithCancel(w.hardCtx)
	defer cancel()
	go func() { // the stream in flight ends when the worker stops claiming
		select {
		case <-w.stopping:
			cancel()
		case <-ctx.Done():
		}
	}()
	failures := 0
	for !w.stopped() {
		free := w.cfg.Concurrency - w.Active()
		names := w.sortedWorkflows()
		w.updateRecord(names)
		// After a stream that used its whole credit, runs may wait in the
		// store: as the poll loop does, wait for refillAt free slots, so that
		// one claim fills them instead of a claim (and a stream) per slot.
		if free <= 0 || len(names) == 0 || free < w.refillAt() && w.hasBacklog() {
			// finish wakes the loop once slots are free; a run that finished
			// since free was read did not see wantMore: count again.
			if free = w.wantMoreFree(); len(names) > 0 && free > 0 && (free >= w.refillAt() || !w.hasBacklog()) {
				continue
			}
			timer := w.cfg.Clock.NewTimer(w.cfg.PollInterval)
			select {
			case <-w.wake:
			case <-timer.C():
				w.mu.Lock()
				w.backlog = false // the fallback: claim whatever is free
				w.mu.Unlock()
			case <-w.stopping:
			}
			timer.Stop()
			continue
		}
		n := min(free, w.cfg.ClaimBatch)
		launched := 0
		gen0 := w.cancelGen.Load()
		sctx, end := context.WithCancel(ctx)
		w.mu.Lock()
		w.stream = &openStream{workflows: names, end: end}
		w.mu.Unlock()
		if !slices.Equal(names, w.sortedWorkflows()) {
			end() // registered meanwhile: Wake may have missed this stream
		}
		reconnect, err := p.ClaimPush(sctx, &store.RunsClaimParams{
			Namespace: w.cfg.Namespace, Queues: w.cfg.Queues, Workflows: names, Versions: w.versions(),
			Worker: w.cfg.Name, Max: n, LeaseDuration: w.cfg.LeaseDuration,
		}, pushWait, func(cr *store.ClaimedRun) {
			launched++
			w.launch(cr)
			w.claimedSince(gen0)
			gen0 = w.cancelGen.Load()
		})
		w.mu.Lock()
		w.stream = nil
		w.mu.Unlock()
		restarted := sctx.Err() != nil && ctx.Err() == nil
		end()
		w.mu.Lock()
		w.backlog = launched == n // the credit was used up: more may be due
		w.mu.Unlock()
		switch {
		case w.stopped():
			return
		case restarted:
			failures = 0 // the workflows changed: open the next stream at once
		case err != nil || reconnect:
			if err != nil {
				w.cfg.Logger.Warn("claim stream", "worker", w.cfg.Name, "err", err, "attempt", failures+1)
			}
			if !w.backoff(failures) {
				return
			}
			failures++
		default:
			failures = 0
		}
	}
}

// backoff waits before reconnection attempt n: exponential from 50ms to 5s,
// with jitter. It returns false when the worker stops first.
func (w *Worker) backoff(n int) bool {
	d := min(50*time.Millisecond<<min(n, 10), 5*time.Second)
	d = d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
	timer := w.cfg.Clock.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C():
		return true
	case <-w.stopping:
		return false
	}
}
