package trellis

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// waiter is something a workflow can wait for without holding a worker: a timer,
// an event, an approval's decision, child runs. Each owns one history position,
// reserved when the workflow creates it.
type waiter interface {
	// settled reports whether the wait is over, from history or because it
	// settled earlier in this execution.
	settled() bool
	// try settles the wait if it can now (the clock has passed, the inbox holds
	// what it waits for), queuing what it records, and reports whether it did.
	try() bool
	// needs says what would wake the run for it: a time and/or event names.
	needs() (wakeAt *time.Time, events []string, reason string)
}

// await waits for w: settled from history, or now, or else the run is released
// until what w needs happens (short timers wait in place). It returns
// ErrCancelled or ErrDeadlineExceeded when the run must stop waiting.
func await(wc *Context, w waiter) error {
	_, err := awaitAny(wc, []waiter{w})
	return err
}

// awaitAny waits for the first of ws, in order of preference when several are
// ready, and returns its index. It never records anything itself; Select records
// the winner.
func awaitAny(wc *Context, ws []waiter) (int, error) {
	rs := wc.rs
	for i, w := range ws {
		if w.settled() {
			return i, nil
		}
	}
	for {
		if err := rs.interrupted(wc.detached); err != nil {
			return -1, err
		}
		for i, w := range ws {
			if w.try() {
				return i, nil
			}
		}
		var (
			wakeAt  *time.Time
			events  []string
			reasons []string
			local   bool // a step running in this worker can settle a case
		)
		for _, w := range ws {
			at, evs, reason := w.needs()
			if at != nil && (wakeAt == nil || at.Before(*wakeAt)) {
				wakeAt = at
			}
			events = append(events, evs...)
			reasons = append(reasons, reason)
			_, isStep := w.(stepWaiter)
			local = local || isStep
		}
		if !local && !rs.waitInPlace(wakeAt, events) {
			rs.suspend(wakeAt, events, joinReasons(reasons))
		}
		if local {
			rs.waitLocal(ws, wakeAt)
		}
	}
}

func joinReasons(rs []string) string {
	rs = slices.DeleteFunc(rs, func(r string) bool { return r == "" })
	if len(rs) == 1 {
		return rs[0]
	}
	b, _ := json.Marshal(rs)
	return "first of " + string(b)
}

// waitInPlace sleeps through a wait that only needs a short timer (at most
// Worker.MaxInlineBackoff), keeping the run; it reports false when the run should
// be released instead. Events can only arrive through a new claim, so a wait for
// one is never done in place.
func (rs *runState) waitInPlace(wakeAt *time.Time, events []string) bool {
	if wakeAt == nil || len(events) > 0 {
		return false
	}
	d := wakeAt.Sub(rs.now())
	if d > rs.c.cfg.Worker.MaxInlineBackoff {
		return false
	}
	rs.sleep(d)
	return true
}

// sleep waits for d, or until the run is cancelled or must unwind.
func (rs *runState) sleep(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-rs.cancelCtx.Done():
	case <-rs.unwinding:
		rs.stopNow()
	}
	rs.checkUnwind()
}

// waitLocal waits while a step of this worker may settle one of ws: until a step
// finishes, the earliest timer is due, or the run is cancelled.
func (rs *runState) waitLocal(ws []waiter, wakeAt *time.Time) {
	var timer <-chan time.Time
	if wakeAt != nil {
		t := time.NewTimer(max(wakeAt.Sub(rs.now()), 0))
		defer t.Stop()
		timer = t.C
	}
	cases := make(chan struct{}, len(ws))
	stop := make(chan struct{})
	defer close(stop)
	for _, w := range ws {
		if s, ok := w.(stepWaiter); ok {
			go func() { // ends with this call (stop) at the latest
				select {
				case <-s.doneChan():
					cases <- struct{}{}
				case <-stop:
				}
			}()
		}
	}
	select {
	case <-cases:
	case <-timer:
	case <-rs.cancelCtx.Done():
	case <-rs.unwinding:
		rs.stopNow()
	}
	rs.checkUnwind()
}

// stepWaiter is an async step's future in a select: it settles in this worker.
type stepWaiter interface {
	waiter
	doneChan() <-chan struct{}
}

// takeEvent takes the oldest event named name from the inbox that this execution
// has not consumed, marking it consumed in the next checkpoint.
func (rs *runState) takeEvent(name string) *store.Event {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	for _, e := range rs.inbox {
		if e.Name == name && !rs.consumed[e.Seq] {
			rs.consumed[e.Seq] = true
			rs.pending.consume = append(rs.pending.consume, e.Seq)
			return e
		}
	}
	return nil
}

// queueWait adds a wait's store writes to the next checkpoint.
func (rs *runState) queueWait(f func(w *queued)) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	f(&rs.pending)
}

// recordWait queues a wait's op: pending (done=false) with its parameters, or done
// with its outcome.
func (rs *runState) recordWait(pos int, kind store.OpKind, name string, done bool, result []byte, err error) *store.Op {
	at := rs.now()
	op := &store.Op{Position: pos, Kind: kind, Name: name, Done: done, Result: result, Attempts: 1, StartedAt: at}
	if done {
		op.FinishedAt = &at
	}
	if err != nil {
		op.Error = errorInfo(err)
	}
	rs.record(op, nil)
	return op
}

// Timer is a durable timer: it fires at a time recorded when it was created, and
// a run waiting for it holds no worker (see Context.Sleep).
type Timer struct {
	wc   *Context
	pos  int
	at   time.Time
	done bool // fired, as recorded
}

// NewTimer starts a durable timer that fires d from now (now as recorded).
func (wc *Context) NewTimer(d time.Duration) *Timer {
	return wc.newTimer(func(now time.Time) time.Time { return now.Add(d) })
}

// NewTimerAt starts a durable timer that fires at t.
func (wc *Context) NewTimerAt(t time.Time) *Timer {
	return wc.newTimer(func(time.Time) time.Time { return t })
}

func (wc *Context) newTimer(due func(now time.Time) time.Time) *Timer {
	rs := wc.rs
	rs.checkUnwind()
	pos, rec := rs.next(store.OpTimer, "")
	t := &Timer{wc: wc, pos: pos}
	if rec != nil {
		if err := json.Unmarshal(rec.Result, &t.at); err != nil {
			rs.block(&NonDeterminismError{Position: pos, Recorded: "timer without a due time", Requested: "timer"})
		}
		t.done = rec.Done
		return t
	}
	t.at = due(rs.now()).UTC()
	b, _ := json.Marshal(t.at)
	rs.recordWait(pos, store.OpTimer, "", false, b, nil)
	return t
}

// At returns when the timer fires.
func (t *Timer) At() time.Time { return t.at }

// Wait blocks until the timer fires. While it waits for more than
// Worker.MaxInlineBackoff the run is released (status waiting) and resumed by
// any worker when due. It returns ErrCancelled or ErrDeadlineExceeded when the
// run is cancelled or reaches its deadline first.
func (t *Timer) Wait(wc *Context) error { return await(wc, t) }

func (t *Timer) settled() bool { return t.done }

func (t *Timer) try() bool {
	rs := t.wc.rs
	if rs.now().Before(t.at) {
		return false
	}
	b, _ := json.Marshal(t.at)
	rs.recordWait(t.pos, store.OpTimer, "", true, b, nil)
	t.done = true
	return true
}

func (t *Timer) needs() (*time.Time, []string, string) {
	at := t.at
	return &at, nil, "sleeping until " + reasonTime(at)
}

// reasonTime formats a time in a wait reason for people: RFC 3339 in UTC, to the
// millisecond (the CLI prints the run's times the same way).
func reasonTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// Sleep waits d durably: see Timer.Wait.
func (wc *Context) Sleep(d time.Duration) error { return wc.NewTimer(d).Wait(wc) }

// SleepUntil waits until t durably: see Timer.Wait.
func (wc *Context) SleepUntil(t time.Time) error { return wc.NewTimerAt(t).Wait(wc) }

// Selectable is a future Select can wait for: *Future (an async step), *Timer,
// *EventFuture, *ChildFuture, *ApprovalFuture.
type Selectable interface {
	waiterOf() waiter
}

func (t *Timer) waiterOf() waiter { return t }

// Select waits for whichever of cases is ready first and returns its index; when
// several are ready, the earliest in cases wins. The choice is recorded, so a
// replay makes the same one. Then call the winner's Get or Wait to take its
// value; the others stay usable. A run waiting only on timers, events, approvals
// and children holds no worker. While an async step among cases is running here,
// the run waits in this worker: events and children are seen once it finishes.
func Select(wc *Context, cases ...Selectable) (int, error) {
	rs := wc.rs
	rs.checkUnwind()
	pos, rec := rs.next(store.OpSelect, "")
	if rec != nil && rec.Done {
		var i int
		if err := json.Unmarshal(rec.Result, &i); err != nil || i < 0 || i >= len(cases) {
			rs.block(&NonDeterminismError{Position: pos, Recorded: fmt.Sprintf("select of case %s", rec.Result),
				Requested: fmt.Sprintf("select of %d cases", len(cases))})
		}
		return i, nil
	}
	ws := make([]waiter, len(cases))
	for i, c := range cases {
		ws[i] = c.waiterOf()
	}
	i, err := awaitAny(wc, ws)
	if err != nil {
		return -1, err
	}
	b, _ := json.Marshal(i)
	rs.recordWait(pos, store.OpSelect, "", true, b, nil)
	return i, nil
}
