package trellis

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"go.opentelemetry.io/otel/trace"
)

// Starts through a server are coalesced. A client sends each start as its own
// POST /runs while fewer than startsInFlight of its start requests are in
// flight; the starts that come while that many are, wait in a queue, and the
// queue goes as one POST runs:batch when one of them answers. One goroutine or
// a few starting now and then see no difference; many starting at once (a
// service under load) send one request per batch instead of one per run, and
// the server writes one idempotency record per batch. Each caller still gets
// its own outcome: a batch the server refuses as a whole for what one of its
// items holds (invalid, forbidden, too large) is sent again one start at a
// time, so that only that item's caller sees the error.
//
// A start whose context carries a trace span always goes alone, so that its run
// is traced as a child of that span (the server takes the parent from the
// request's traceparent header, one per request).
const (
	startsInFlight = 4
	// startBatchBytes bounds the inputs of one coalesced batch, well inside
	// the server's default body limit (2 MiB).
	startBatchBytes = 1 << 20
)

// starts coalesces a remote client's concurrent starts (see startsInFlight).
// The goroutines that send batches belong to it: close fails what is queued
// and waits for them.
type starts struct {
	r      *remote
	ctx    context.Context // of batches: no caller's, ended by close
	cancel context.CancelFunc

	mu       sync.Mutex
	inflight int
	queue    []*queuedStart
	closed   bool
	senders  sync.WaitGroup
}

type queuedStart struct {
	ctx  context.Context
	name string
	body startBody
	done chan struct{} // closed when run or err is set
	run  *Run
	err  error
}

func newStarts(r *remote) *starts {
	ctx, cancel := context.WithCancel(context.Background())
	return &starts{r: r, ctx: ctx, cancel: cancel}
}

// start starts one run: alone, or in the next batch.
func (s *starts) start(ctx context.Context, name string, body startBody) (*Run, error) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		return s.r.startOne(ctx, name, body)
	}
	s.mu.Lock()
	if s.inflight < startsInFlight || s.closed {
		s.inflight++
		s.mu.Unlock()
		defer s.answered()
		return s.r.startOne(ctx, name, body)
	}
	q := &queuedStart{ctx: ctx, name: name, body: body, done: make(chan struct{})}
	s.queue = append(s.queue, q)
	s.mu.Unlock()
	select {
	case <-q.done:
		return q.run, q.err
	case <-ctx.Done():
		// Sent or not, the run may start, as when a single request's answer
		// is lost.
		return nil, ctx.Err()
	}
}

// answered is called when a start request has its answer: the queue, if any,
// goes as the next batch.
func (s *starts) answered() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inflight--
	if len(s.queue) == 0 || s.inflight >= startsInFlight { // close empties the queue, and nothing queues after it
		return
	}
	batch := s.take()
	if len(batch) == 0 { // every queued caller has gone
		return
	}
	s.inflight++
	s.senders.Go(func() {
		defer s.answered()
		s.send(batch)
	})
}

// take removes the next batch from the queue: up to MaxStartMany starts and
// startBatchBytes of inputs. Starts whose callers have gone are dropped.
func (s *starts) take() []*queuedStart {
	n, size := 0, 0
	var batch []*queuedStart
	for _, q := range s.queue {
		if len(batch) == MaxStartMany || len(batch) > 0 && size+len(q.body.Input) > startBatchBytes {
			break
		}
		n++
		if q.ctx.Err() != nil {
			q.err = q.ctx.Err()
			close(q.done)
			continue
		}
		size += len(q.body.Input)
		batch = append(batch, q)
	}
	s.queue = s.queue[n:]
	return batch
}

// send sends a batch and hands each caller its outcome.
func (s *starts) send(batch []*queuedStart) {
	if len(batch) == 1 {
		q := batch[0]
		q.run, q.err = s.r.startOne(q.ctx, q.name, q.body)
		close(q.done)
		return
	}
	runs := make([]startBody, len(batch))
	for i, q := range batch {
		runs[i] = q.body
	}
	res, err := s.r.startBatch(s.ctx, runs)
	var re *RemoteError
	if errors.As(err, &re) && refusedForAnItem(re.Status) {
		for _, q := range batch {
			if q.ctx.Err() == nil {
				q.run, q.err = s.r.startOne(q.ctx, q.name, q.body)
			}
			close(q.done)
		}
		return
	}
	for i, q := range batch {
		switch {
		case err != nil:
			q.err = fmt.Errorf("starting %s: %w", q.name, err)
		case res[i].Error != nil:
			q.err = fmt.Errorf("starting %s: %w", q.name, itemError(res[i].Error))
		case res[i].Run == nil:
			q.err = fmt.Errorf("starting %s: %w: no run in the answer", q.name, ErrUnavailable)
		default:
			q.run = res[i].Run
		}
		close(q.done)
	}
}

// itemError is the error of a batch item as the same start alone would have
// met it: a RemoteError (409 run_exists, the one code an item fails with).
func itemError(e *StartError) error {
	re := &RemoteError{Status: http.StatusInternalServerError, Code: e.Code, Detail: e.Message, err: e.Unwrap()}
	if errors.Is(re.err, ErrRunExists) {
		re.Status = http.StatusConflict
	}
	return re
}

// refusedForAnItem reports the statuses with which a server refuses a whole
// batch for what one item holds (an invalid field, a queue the token may not
// start on, a body over the limit): each start alone gets its own answer.
func refusedForAnItem(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound, http.StatusRequestEntityTooLarge,
		http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// close fails the queued starts with ErrClosed and waits for the batches in
// flight, whose requests it cancels.
func (s *starts) close() {
	s.mu.Lock()
	s.closed = true
	for _, q := range s.queue {
		q.err = fmt.Errorf("starting %s: %w", q.name, ErrClosed)
		close(q.done)
	}
	s.queue = nil
	s.mu.Unlock()
	s.cancel()
	s.senders.Wait()
}
