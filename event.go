package trellis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// ErrEventTimeout: a wait for an event ended at its timeout without one.
var ErrEventTimeout = errors.New("timed out waiting for event")

const errTypeEventTimeout = "event_timeout"

// EventFuture is a wait for the next event of one name sent to the run.
type EventFuture[T any] struct {
	wc       *Context
	pos      int
	name     string
	deadline *time.Time
	op       *store.Op // the recorded outcome, once settled
}

// eventWait is what an event op records while it waits.
type eventWait struct {
	Deadline *time.Time `json:"deadline,omitempty"`
}

// OnEvent starts waiting for the next event named name (see Client.SendEvent); a
// timeout above zero ends the wait with ErrEventTimeout. Events that arrived
// before are in the run's inbox: each is delivered once, oldest first per name.
func OnEvent[T any](wc *Context, name string, timeout time.Duration) *EventFuture[T] {
	rs := wc.rs
	rs.checkUnwind()
	pos, rec := rs.next(store.OpEvent, name)
	f := &EventFuture[T]{wc: wc, pos: pos, name: name}
	switch {
	case rec != nil && rec.Done:
		f.op = rec
	case rec != nil:
		var w eventWait
		if err := json.Unmarshal(rec.Result, &w); err != nil {
			rs.block(&NonDeterminismError{Position: pos, Recorded: describe(rec.Kind, rec.Name) + " with unreadable state", Requested: describe(store.OpEvent, name)})
		}
		f.deadline = w.Deadline
	default:
		var w eventWait
		if timeout > 0 {
			d := rs.now().Add(timeout).UTC()
			w.Deadline, f.deadline = &d, &d
		}
		b, _ := json.Marshal(w)
		rs.recordWait(pos, store.OpEvent, name, false, b, nil)
	}
	return f
}

// WaitEvent waits for the next event named name and returns its payload,
// decoded; see OnEvent. The run holds no worker while it waits.
func WaitEvent[T any](wc *Context, name string, timeout time.Duration) (T, error) {
	return OnEvent[T](wc, name, timeout).Get(wc)
}

// Get waits for the event and returns its payload, or ErrEventTimeout,
// ErrCancelled or ErrDeadlineExceeded.
func (f *EventFuture[T]) Get(wc *Context) (T, error) {
	var v T
	if err := await(wc, f); err != nil {
		return v, err
	}
	if f.op.Error != nil {
		return v, fmt.Errorf("%w %q", ErrEventTimeout, f.name)
	}
	if err := f.wc.rs.codec.Unmarshal(f.op.Result, &v); err != nil {
		return v, fmt.Errorf("decoding event %q: %w", f.name, err)
	}
	return v, nil
}

func (f *EventFuture[T]) waiterOf() waiter { return f }
func (f *EventFuture[T]) settled() bool    { return f.op != nil }

func (f *EventFuture[T]) try() bool {
	rs := f.wc.rs
	if e := rs.takeEvent(f.name); e != nil {
		f.op = rs.recordWait(f.pos, store.OpEvent, f.name, true, e.Payload, nil)
		return true
	}
	if f.deadline != nil && !rs.now().Before(*f.deadline) {
		// Guard the timeout: if the event arrived after the claim, the checkpoint
		// is refused and the run replays with it.
		rs.queueWait(func(w *queued) { w.noEvents = append(w.noEvents, f.name) })
		err := &typedError{msg: fmt.Sprintf("%s %q", ErrEventTimeout, f.name), typ: errTypeEventTimeout}
		f.op = rs.recordWait(f.pos, store.OpEvent, f.name, true, nil, err)
		return true
	}
	return false
}

func (f *EventFuture[T]) needs() (*time.Time, []string, string) {
	reason := fmt.Sprintf("waiting for event %q", f.name)
	if f.deadline != nil {
		reason += " until " + reasonTime(*f.deadline)
	}
	return f.deadline, []string{f.name}, reason
}

// typedError is an error recorded with an explicit type.
type typedError struct{ msg, typ string }

func (e *typedError) Error() string { return e.msg }

// SendEvent sends an event to a run (by run ID, or workflow ID meaning its
// latest run): payload is encoded with the client's codec and kept in the run's
// inbox until the run takes it. It is durable when SendEvent returns, and wakes
// the run at once if it waits for that name. ErrRunNotFound or ErrRunFinished
// when there is no active run to receive it.
func (c *Client) SendEvent(ctx context.Context, ref, name string, payload any) error {
	if name == "" {
		return fmt.Errorf("sending event: %w: empty name", ErrInvalidParams)
	}
	b, err := c.cfg.Codec.Marshal(payload)
	if err != nil {
		return fmt.Errorf("encoding event %q: %w", name, err)
	}
	if len(b) > c.cfg.MaxPayloadBytes {
		return fmt.Errorf("%w: event %q is %d bytes (limit %d)", ErrPayloadTooLarge, name, len(b), c.cfg.MaxPayloadBytes)
	}
	p := &store.EventSendParams{Namespace: c.cfg.Namespace, Ref: ref, Name: name, Payload: b}
	// If the event wakes a run this process's worker runs and it has a free
	// slot, the store leases the run to it in the same transaction.
	reserved := c.worker != nil && c.worker.Reserve()
	if reserved {
		p.Claim = &store.EventClaim{Worker: c.worker.Name(), LeaseDuration: c.worker.LeaseDuration(),
			Workflows: c.reg.names(), Queues: c.cfg.Worker.Queues}
	}
	res, err := c.store.EventSend(ctx, p)
	switch {
	case reserved && err == nil && res.Claimed != nil:
		c.local.begin(res.Claimed.Run.ID)
		c.worker.Launch(res.Claimed)
	case reserved:
		c.worker.Unreserve()
	}
	if err != nil {
		return fmt.Errorf("sending event %q to %s: %w", name, ref, err)
	}
	return nil
}
