package forward

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// MaxInFlight is how many requests Serve runs at once; the next one waits for
// a free slot (the subscription's pending buffer holds it meanwhile).
const MaxInFlight = 1024

// QueueGroup is the queue group of Serve's subscriptions: a request reaches
// one of the servers subscribed on its subject.
const QueueGroup = "trellis-forward"

// Handler runs one forwarded request: method with its parameters in the wire
// encoding (Unmarshal them). It returns the result (encoded with Marshal, nil
// for none), the log sequence the caller's replica must reach before the
// caller returns (0: none), and an error, whose store sentinel the caller's
// errors.Is sees. It returns ErrNotLeader when its server does not lead, and
// ErrUnknownMethod for a method it does not know. ctx ends at the caller's
// deadline, when the caller sent one.
type Handler func(ctx context.Context, method string, params json.RawMessage) (result any, seq uint64, err error)

// request is a forwarded call on the wire.
type request struct {
	Method string          `json:"method"`
	Params json.RawMessage `json:"params,omitempty"`
	// TimeoutMS is what is left of the caller's wait when it sent the request.
	TimeoutMS int64 `json:"timeout_ms,omitempty"`
}

// reply is the answer to a request.
type reply struct {
	Result json.RawMessage `json:"result,omitempty"`
	Error  *wireError      `json:"error,omitempty"`
	Seq    uint64          `json:"seq,omitempty"`
}

// server answers requests on one subscription.
type server struct {
	nc   *nats.Conn
	h    Handler
	slot chan struct{} // a token per request in flight
	quit chan struct{} // closed by stop

	mu      sync.Mutex
	stopped bool
	running sync.WaitGroup
}

// Serve answers the requests sent to subject (in QueueGroup) with h, each in
// its own goroutine. stop removes the subscription, answers the requests that
// were queued for it "not_leader" (their callers retry elsewhere), and waits
// for the requests in flight to finish and be answered; it is idempotent. Serve returns once the
// NATS server has the subscription.
func Serve(nc *nats.Conn, subject string, h Handler) (stop func(), err error) {
	switch {
	case nc == nil:
		return nil, errors.New("forward: Serve needs a NATS connection")
	case subject == "":
		return nil, errors.New("forward: Serve needs a subject")
	case h == nil:
		return nil, errors.New("forward: Serve needs a handler")
	}
	s := &server{nc: nc, h: h, slot: make(chan struct{}, MaxInFlight), quit: make(chan struct{})}
	sub, err := nc.QueueSubscribe(subject, QueueGroup, s.receive)
	if err != nil {
		return nil, fmt.Errorf("forward: subscribing to %q: %w", subject, err)
	}
	if err := nc.Flush(); err != nil {
		_ = sub.Unsubscribe()
		return nil, fmt.Errorf("forward: subscribing to %q: %w", subject, err)
	}
	return sync.OnceFunc(func() {
		close(s.quit) // what is still queued is answered not_leader
		drain(nc, sub)
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
		s.running.Wait()
	}), nil
}

// drain removes the subscription's interest and waits until the requests
// the NATS server had already sent it were received and answered: dropped
// instead (Unsubscribe), each would leave its caller waiting for its timeout
// and an unknown outcome.
func drain(nc *nats.Conn, sub *nats.Subscription) {
	closed := sub.StatusChanged(nats.SubscriptionClosed)
	if err := sub.Drain(); err != nil {
		return // the connection is closed: nothing more arrives
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-closed:
			return
		case <-tick.C:
			if nc.IsClosed() {
				return
			}
		}
	}
}

// receive takes one request from the subscription's goroutine and starts its
// own goroutine, waiting for a free slot first.
func (s *server) receive(msg *nats.Msg) {
	select {
	case <-s.quit:
		s.respond(msg, reply{Error: toWire(ErrNotLeader)})
		return
	default:
	}
	select {
	case s.slot <- struct{}{}:
	case <-s.quit:
		s.respond(msg, reply{Error: toWire(ErrNotLeader)})
		return
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		<-s.slot
		s.respond(msg, reply{Error: toWire(ErrNotLeader)})
		return
	}
	s.running.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.running.Done()
		defer func() { <-s.slot }()
		s.respond(msg, s.handle(msg.Data))
	}()
}

// handle runs one request.
func (s *server) handle(data []byte) reply {
	var req request
	if err := json.Unmarshal(data, &req); err != nil {
		return reply{Error: &wireError{Code: codeInternal, Message: "forward: malformed request: " + err.Error()}}
	}
	ctx := context.Background()
	if req.TimeoutMS > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.TimeoutMS)*time.Millisecond)
		defer cancel()
	}
	result, seq, err := s.h(ctx, req.Method, req.Params)
	if err != nil {
		return reply{Error: toWire(err), Seq: seq}
	}
	raw, err := Marshal(result)
	if err != nil {
		// The write is done: say so, so that the caller does not retry it.
		return reply{Seq: seq, Error: &wireError{Code: codeInternal,
			Message: fmt.Sprintf("forward: %s applied, but its result cannot be sent: %v", req.Method, err)}}
	}
	return reply{Result: raw, Seq: seq}
}

// respond sends r to msg's reply subject. A reply larger than the connection's
// maximum payload is replaced by an error that says the write was applied.
func (s *server) respond(msg *nats.Msg, r reply) {
	data, err := json.Marshal(r)
	if err == nil && int64(len(data)) > s.nc.MaxPayload() {
		data, err = json.Marshal(reply{Seq: r.Seq, Error: &wireError{Code: codeInternal,
			Message: fmt.Sprintf("forward: the answer (%d bytes) exceeds the NATS maximum payload (%d bytes); a write was applied",
				len(data), s.nc.MaxPayload())}})
	}
	if err == nil {
		err = msg.Respond(data)
	}
	_ = err // the caller times out and reports an unknown outcome
}
