package engine

import (
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// Waiter is something a workflow can wait for without holding a worker: a timer,
// an event, an approval's decision, child runs (and, in a select, an async step).
// Each owns one history position, reserved when the workflow creates it. Only the
// engine's types implement it.
type Waiter interface {
	// settled reports whether the wait is over, from history or because it
	// settled earlier in this execution.
	settled() bool
	// try settles the wait if it can now (the clock has passed, the inbox holds
	// what it waits for), queuing what it records, and reports whether it did.
	try() bool
	// needs says what would wake the run for it: a time and/or event names.
	needs() (wakeAt *time.Time, events []string, reason string)
}

// Await waits for w: settled from history, or now, or else the run is released
// until what w needs happens (short timers wait in place). It returns
// ErrCancelled (unless detached) or ErrDeadlineExceeded when the run must stop waiting.
func (rs *RunState) Await(w Waiter, detached bool) error {
	_, err := rs.awaitAny([]Waiter{w}, detached)
	return err
}

// awaitAny waits for the first of ws, in order of preference when several are
// ready, and returns its index. It never records anything itself; Select records
// the winner.
func (rs *RunState) awaitAny(ws []Waiter, detached bool) (int, error) {
	for i, w := range ws {
		if w.settled() {
			return i, nil
		}
	}
	for {
		if err := rs.interrupted(detached); err != nil {
			return -1, err
		}
		for i, w := range ws {
			if w.try() {
				return i, nil
			}
		}
		wakeAt, events, reason, local := needsOf(ws)
		if !local && !rs.waitInPlace(wakeAt, events) {
			rs.suspend(wakeAt, events, reason)
		}
		if local {
			rs.waitLocal(ws, wakeAt)
		}
	}
}

// needsOf merges what ws need: the earliest time, every event, the reasons, and
// whether a step running in this worker can settle one of them.
func needsOf(ws []Waiter) (wakeAt *time.Time, events []string, reason string, local bool) {
	var reasons []string
	for _, w := range ws {
		at, evs, r := w.needs()
		if at != nil && (wakeAt == nil || at.Before(*wakeAt)) {
			wakeAt = at
		}
		events = append(events, evs...)
		reasons = append(reasons, r)
		_, isStep := w.(stepWaiter)
		local = local || isStep
	}
	return wakeAt, events, joinReasons(reasons), local
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
// MaxInlineBackoff), keeping the run; it reports false when the run should
// be released instead. Events can only arrive through a new claim, so a wait for
// one is never done in place.
func (rs *RunState) waitInPlace(wakeAt *time.Time, events []string) bool {
	if wakeAt == nil || len(events) > 0 {
		return false
	}
	d := wakeAt.Sub(rs.now())
	if d > rs.e.cfg.MaxInlineBackoff {
		return false
	}
	rs.flushBeforeSleep()
	rs.sleep(wakeAt.Sub(rs.now())) // after the checkpoint, which took time
	return true
}

// sleep waits for d, or until the run is cancelled or must unwind.
func (rs *RunState) sleep(d time.Duration) {
	t := rs.e.cfg.Clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
	case <-rs.cancelCtx.Done():
	case <-rs.unwinding:
		rs.stopNow()
	}
	rs.checkUnwind()
}

// waitLocal waits while a step of this worker may settle one of ws: until a step
// finishes, the earliest timer is due, or the run is cancelled.
func (rs *RunState) waitLocal(ws []Waiter, wakeAt *time.Time) {
	var timer <-chan time.Time
	if wakeAt != nil {
		t := rs.e.cfg.Clock.NewTimer(max(wakeAt.Sub(rs.now()), 0))
		defer t.Stop()
		timer = t.C()
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
	Waiter
	doneChan() <-chan struct{}
}

// takeEvent takes the oldest event named name from the inbox that this execution
// has not consumed, marking it consumed in the next checkpoint.
func (rs *RunState) takeEvent(name string) *store.Event {
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
func (rs *RunState) queueWait(f func(w *queued)) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	f(&rs.pending)
}

// recordWait queues a wait's op: pending (done=false) with its parameters, or done
// with its outcome.
func (rs *RunState) recordWait(pos int, kind store.OpKind, name string, done bool, result []byte, err error) *store.Op {
	at := rs.now()
	op := &store.Op{Position: pos, Kind: kind, Name: name, Done: done, Result: result, Attempts: 1, StartedAt: at}
	if done {
		op.FinishedAt = &at
	}
	if err != nil {
		op.Error = rs.errorInfo(err)
	}
	rs.record(op, nil)
	return op
}

// Timer is a durable timer: it fires at a time recorded when it was created.
type Timer struct {
	rs   *RunState
	pos  int
	at   time.Time
	done bool // fired, as recorded
}

// NewTimer starts the durable timer t, due at due(now) (now as recorded).
func (rs *RunState) NewTimer(t *Timer, due func(now time.Time) time.Time) {
	rs.checkUnwind()
	pos, rec := rs.next(store.OpTimer, "")
	t.rs, t.pos = rs, pos
	if rec != nil {
		if err := json.Unmarshal(rec.Result, &t.at); err != nil {
			rs.block(&NonDeterminismError{Position: pos, Recorded: "timer without a due time", Requested: "timer"})
		}
		t.done = rec.Done
		return
	}
	t.at = due(rs.now()).UTC()
	b, _ := json.Marshal(t.at)
	rs.recordWait(pos, store.OpTimer, "", false, b, nil)
}

// At returns when the timer fires.
func (t *Timer) At() time.Time { return t.at }

func (t *Timer) settled() bool { return t.done }

func (t *Timer) try() bool {
	rs := t.rs
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

// Select waits for whichever of ws is ready first and returns its index; when
// several are ready, the earliest wins. The choice is recorded.
func (rs *RunState) Select(ws []Waiter, detached bool) (int, error) {
	rs.checkUnwind()
	pos, rec := rs.next(store.OpSelect, "")
	if rec != nil && rec.Done {
		var i int
		if err := json.Unmarshal(rec.Result, &i); err != nil || i < 0 || i >= len(ws) {
			rs.block(&NonDeterminismError{Position: pos, Recorded: fmt.Sprintf("select of case %s", rec.Result),
				Requested: fmt.Sprintf("select of %d cases", len(ws))})
		}
		return i, nil
	}
	i, err := rs.awaitAny(ws, detached)
	if err != nil {
		return -1, err
	}
	b, _ := json.Marshal(i)
	rs.recordWait(pos, store.OpSelect, "", true, b, nil)
	return i, nil
}
