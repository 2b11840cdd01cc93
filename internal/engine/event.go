package engine

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// EventWait is a wait for the next event of one name sent to the run.
type EventWait struct {
	rs       *RunState
	pos      int
	name     string
	deadline *time.Time
	op       *store.Op // the recorded outcome, once settled
}

// eventState is what an event op records while it waits.
type eventState struct {
	Deadline *time.Time `json:"deadline,omitempty"`
}

// OnEvent starts f, a wait for the next event named name; a timeout above zero
// ends the wait with ErrEventTimeout.
func (rs *RunState) OnEvent(f *EventWait, name string, timeout time.Duration) {
	rs.checkUnwind()
	pos, rec := rs.next(store.OpEvent, name)
	f.rs, f.pos, f.name = rs, pos, name
	switch {
	case rec != nil && rec.Done:
		f.op = rec
	case rec != nil:
		var w eventState
		if err := json.Unmarshal(rec.Result, &w); err != nil {
			rs.block(&NonDeterminismError{Position: pos, Recorded: describe(rec.Kind, rec.Name) + " with unreadable state", Requested: describe(store.OpEvent, name)})
		}
		f.deadline = w.Deadline
	default:
		var w eventState
		if timeout > 0 {
			d := rs.now().Add(timeout).UTC()
			w.Deadline, f.deadline = &d, &d
		}
		b, _ := json.Marshal(w)
		rs.recordWait(pos, store.OpEvent, name, false, b, nil)
	}
}

// Op returns the recorded outcome once the wait settled: the event's payload, or
// an error when it timed out.
func (f *EventWait) Op() *store.Op { return f.op }

func (f *EventWait) settled() bool { return f.op != nil }

func (f *EventWait) try() bool {
	rs := f.rs
	if e := rs.takeEvent(f.name); e != nil {
		f.op = rs.recordWait(f.pos, store.OpEvent, f.name, true, e.Payload, nil)
		return true
	}
	if f.deadline != nil && !rs.now().Before(*f.deadline) {
		// Guard the timeout: if the event arrived after the claim, the checkpoint
		// is refused and the run replays with it.
		rs.queueWait(func(w *queued) { w.noEvents = append(w.noEvents, f.name) })
		err := &TypedError{Msg: fmt.Sprintf("%s %q", ErrEventTimeout, f.name), Type: TypeEventTimeout}
		f.op = rs.recordWait(f.pos, store.OpEvent, f.name, true, nil, err)
		return true
	}
	return false
}

func (f *EventWait) needs() (*time.Time, []string, string) {
	reason := fmt.Sprintf("waiting for event %q", f.name)
	if f.deadline != nil {
		reason += " until " + reasonTime(*f.deadline)
	}
	return f.deadline, []string{f.name}, reason
}
