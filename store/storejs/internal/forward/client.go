package forward

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
)

// Defaults of Client's fields.
const (
	// DefaultTimeout bounds one request, when the caller's context does not end
	// sooner.
	DefaultTimeout = 30 * time.Second
	// DefaultNoLeaderWait is how long a call waits for a leader.
	DefaultNoLeaderWait = 15 * time.Second
)

// Backoff between attempts while no leader answers: doubling from
// minBackoff to maxBackoff.
const (
	minBackoff = 10 * time.Millisecond
	maxBackoff = 500 * time.Millisecond
)

// Client sends a follower's writes to the leader. Its fields are set before
// the first Call; it is safe for concurrent use then.
type Client struct {
	// NC is the connection to NATS.
	NC *nats.Conn
	// Subject is the subject the leader serves (Serve).
	Subject string
	// Wait returns once the local replica has applied the log up to seq, or
	// ctx's error. Nil: calls do not wait.
	Wait func(ctx context.Context, seq uint64) error
	// Timeout bounds one request (0: DefaultTimeout).
	Timeout time.Duration
	// NoLeaderWait is how long a call retries while no leader answers (0:
	// DefaultNoLeaderWait).
	NoLeaderWait time.Duration
	// LeaderChanged, when set, returns a channel closed when a new leader
	// begins (a new term). A request sent before it closed is answered by
	// the old leader, if ever: when that one died with it (SIGKILLed), the
	// call would otherwise wait out its Timeout. It waits ChangeGrace more
	// for an answer (one the new leader took in the meantime comes within
	// it) and then fails with ErrOutcomeUnknown.
	LeaderChanged func() <-chan struct{}
	// ChangeGrace: see LeaderChanged (0: no grace).
	ChangeGrace time.Duration
}

// errLeaderChanged is the cause of a request given up because a new leader
// began while it was in flight (Client.LeaderChanged).
var errLeaderChanged = errors.New("a new leader began while the write was in flight, and the old one did not answer")

// Call runs method on the leader with the parameters in and decodes its result
// into out (a pointer; nil to drop it), both in the wire encoding (Marshal).
// An error the leader returns keeps its message and its store sentinel
// (errors.Is), see Error. Before returning, Call waits (Client.Wait) until the
// local replica has applied the leader's answer, so that the caller reads what
// it wrote (and what the leader saw when it refused).
//
// It retries while no server leads, for up to NoLeaderWait, then fails with
// ErrNoLeader. A request sent but not answered fails with ErrOutcomeUnknown.
func (c *Client) Call(ctx context.Context, method string, in, out any) error {
	if c.NC == nil || c.Subject == "" {
		return errors.New("forward: Client needs NC and Subject")
	}
	params, err := Marshal(in)
	if err != nil {
		return fmt.Errorf("forwarding %s: %w", method, err)
	}
	r, err := c.send(ctx, method, params)
	if err != nil {
		return err
	}
	if r.Error != nil {
		callErr := fromWire(r.Error)
		if r.Seq > 0 && c.Wait != nil {
			_ = c.Wait(ctx, r.Seq) // best effort: the leader's error is the answer
		}
		return callErr
	}
	if out != nil && len(r.Result) > 0 {
		if err := Unmarshal(r.Result, out); err != nil {
			return fmt.Errorf("forwarding %s: applied at sequence %d, but its result: %w", method, r.Seq, err)
		}
	}
	if r.Seq > 0 && c.Wait != nil {
		if err := c.Wait(ctx, r.Seq); err != nil {
			return fmt.Errorf("forwarding %s: applied at sequence %d, but the local replica has not caught up: %w", method, r.Seq, err)
		}
	}
	return nil
}

// send sends the request until a leader answers it.
func (c *Client) send(ctx context.Context, method string, params []byte) (*reply, error) {
	wait := c.NoLeaderWait
	if wait <= 0 {
		wait = DefaultNoLeaderWait
	}
	giveUp := time.NewTimer(wait)
	defer giveUp.Stop()
	backoff := minBackoff
	for {
		r, err := c.attempt(ctx, method, params)
		switch {
		case err == nil && (r.Error == nil || r.Error.Code != codeNotLeader):
			return r, nil
		case err != nil && !errors.Is(err, nats.ErrNoResponders):
			return nil, err
		}
		// Nobody took the request: nothing was written, so it can go again.
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-giveUp.C:
			t.Stop()
			return nil, fmt.Errorf("forwarding %s: %w for %v", method, ErrNoLeader, wait)
		case <-ctx.Done():
			t.Stop()
		}
		if err := ctx.Err(); err != nil { // also when the backoff ended with it
			return nil, fmt.Errorf("forwarding %s: %w before the context ended: %w", method, ErrNoLeader, err)
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// attempt sends the request once.
func (c *Client) attempt(ctx context.Context, method string, params []byte) (*reply, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("forwarding %s: %w", method, err) // not sent
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if c.LeaderChanged != nil {
		var giveUp context.CancelCauseFunc
		rctx, giveUp = context.WithCancelCause(rctx)
		defer c.onLeaderChange(rctx, giveUp)()
	}
	deadline, _ := rctx.Deadline()
	data, err := json.Marshal(request{Method: method, Params: params, TimeoutMS: time.Until(deadline).Milliseconds()})
	if err != nil {
		return nil, fmt.Errorf("forwarding %s: %w", method, err)
	}
	if c.NC.IsClosed() {
		return nil, fmt.Errorf("forwarding %s: %w", method, nats.ErrConnectionClosed) // not sent
	}
	msg, err := c.NC.RequestWithContext(rctx, c.Subject, data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return nil, err
	case err != nil && errors.Is(context.Cause(rctx), errLeaderChanged) && ctx.Err() == nil:
		return nil, fmt.Errorf("forwarding %s: %w: %w", method, ErrOutcomeUnknown, errLeaderChanged)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled), errors.Is(err, nats.ErrTimeout),
		errors.Is(err, nats.ErrDisconnected), errors.Is(err, nats.ErrConnectionClosed):
		// Sent (the checks above passed), not answered.
		return nil, fmt.Errorf("forwarding %s: %w: %w", method, ErrOutcomeUnknown, err)
	case err != nil:
		return nil, fmt.Errorf("forwarding %s: %w", method, err)
	}
	var r reply
	if err := json.Unmarshal(msg.Data, &r); err != nil {
		return nil, fmt.Errorf("forwarding %s: %w: malformed reply: %w", method, ErrOutcomeUnknown, err)
	}
	return &r, nil
}

// onLeaderChange gives the request of ctx up (giveUp, errLeaderChanged)
// ChangeGrace after a new leader begins, unless it ended first; the function
// it returns stops watching, and returns once the watcher has.
func (c *Client) onLeaderChange(ctx context.Context, giveUp context.CancelCauseFunc) (stop func()) {
	changed := c.LeaderChanged()
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		if c.ChangeGrace > 0 {
			t := time.NewTimer(c.ChangeGrace)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
		giveUp(errLeaderChanged)
	}()
	return func() {
		giveUp(nil)
		<-done
	}
}
