// Package streams follows a run's stream (store/stream.go) from a cursor: the
// shared loop of the server's SSE route and of an embedded client's
// Client.Stream. It holds no history: it reads the store from its cursor and
// waits for the run's StreamTopic between reads.
package streams

import (
	"context"
	"errors"
	"time"

	"github.com/trellis-dev/trellis/internal/clock"
	"github.com/trellis-dev/trellis/store"
)

// Source is what following needs of a store.
type Source interface {
	StreamRead(ctx context.Context, p *store.StreamReadParams) (*store.StreamReadResult, error)
	Subscribe(ctx context.Context, topic string) (<-chan struct{}, func(), error)
}

// CrossProcess is implemented by stores whose wake-ups carry the commits of
// other processes (Postgres' NOTIFY). Following a store that does not also
// re-reads every Options.Poll, so that events written by another process on
// the same SQLite file are seen; when the store tells whether another process
// committed (store.ForeignCommits), only the polls after such a commit read.
type CrossProcess interface{ CrossProcessSignals() bool }

// Now, as the cursor of Follow, starts after the run's last event: only new
// events follow.
const Now = -1

// ErrStopped is what Follow returns when Options.Stop, Options.Gone or
// Options.End closed.
var ErrStopped = errors.New("stream stopped")

// Options tunes Follow. Zero fields turn the feature off.
type Options struct {
	// Idle is called after Heartbeat passed without an event written (to keep
	// a connection open); its error ends Follow.
	Heartbeat time.Duration
	Idle      func() error
	// Poll is how often the store is read without a wake-up, for stores that do
	// not signal across processes (see CrossProcess); default 1s for them. The
	// followers of one store with the same Poll share one poller (foreignWatch).
	Poll time.Duration
	// Stop ends Follow with ErrStopped when it closes (a server shutting down).
	Stop <-chan struct{}
	// Gone ends Follow with ErrStopped when it closes (the client went).
	Gone <-chan struct{}
	// End ends Follow with ErrStopped when it closes (the server ends the
	// stream: its credential was revoked). It is looked at before each read
	// too, so that a stream that is never idle ends as soon.
	End <-chan struct{}
	// PageSize is the events read at once; default 500.
	PageSize int
	// Flush, when set, is called after the events of each read were emitted.
	Flush func() error
	// Clock times the heartbeat; default the wall clock.
	Clock clock.Clock
}

// Follow calls emit with each event of the run's stream after the sequence
// after (Now: after the last one at the start), in order, waiting for new ones,
// until the run has finished and its last event was emitted (nil), ctx ends
// (its error), Options.Stop closes (ErrStopped), or a read or emit fails.
func Follow(ctx context.Context, src Source, namespace, runID string, after int64, o Options,
	emit func(*store.StreamEvent) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wake, unsubscribe, err := src.Subscribe(ctx, store.StreamTopic(namespace, runID))
	if err != nil {
		return err
	}
	defer unsubscribe()
	if o.PageSize <= 0 {
		o.PageSize = 500
	}
	if cp, ok := src.(CrossProcess); (!ok || !cp.CrossProcessSignals()) && o.Poll == 0 {
		o.Poll = time.Second
	}
	var foreign *foreignWatch // polls for the commits wake-ups miss
	if o.Poll > 0 {
		foreign = acquireWatch(src, o.Poll)
		defer foreign.release()
	}
	src = offStack{src}
	if after < 0 {
		res, err := src.StreamRead(ctx, &store.StreamReadParams{Namespace: namespace, RunID: runID, Limit: 1})
		if err != nil {
			return err
		}
		after = res.Last
	}
	var (
		timer clock.Timer
		ended <-chan struct{} // the run's RunTopic, once its stream was read empty
	)
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	clk := clock.Or(o.Clock)
	lastWrite := clk.Now()
	for {
		select {
		case <-o.End:
			return ErrStopped
		default:
		}
		var polled <-chan struct{} // taken before the read: see foreignWatch
		if foreign != nil {
			polled = foreign.changed()
		}
		res, err := src.StreamRead(ctx, &store.StreamReadParams{Namespace: namespace, RunID: runID, After: after, Limit: o.PageSize})
		if err != nil {
			return err
		}
		for _, ev := range res.Events {
			if err := emit(ev); err != nil {
				return err
			}
			after = ev.Sequence
		}
		if len(res.Events) > 0 {
			lastWrite = clk.Now()
			if o.Flush != nil {
				if err := o.Flush(); err != nil {
					return err
				}
			}
		}
		if res.Finished {
			return nil
		}
		if ended == nil && res.Last == 0 {
			// Nothing written yet. A job ends without writing to its stream
			// (its final event is made when read, see store.FinalEvent) and
			// signals only its RunTopic: subscribe to that as well, then read
			// again, so that an end between the two is not missed.
			ch, unsubscribeEnded, err := src.Subscribe(ctx, store.RunTopic(namespace, runID))
			if err != nil {
				return err
			}
			defer unsubscribeEnded()
			ended = ch
			continue
		}
		if len(res.Events) == o.PageSize {
			continue // more to read at once
		}
		for woken := false; !woken; {
			var tick <-chan time.Time
			if o.Heartbeat > 0 {
				d := max(lastWrite.Add(o.Heartbeat).Sub(clk.Now()), 0)
				if timer == nil {
					timer = clk.NewTimer(d)
				} else {
					timer.Reset(d)
				}
				tick = timer.C()
			}
			select {
			case <-wake:
				woken = true
			case <-ended:
				woken = true
			case <-polled:
				woken = true
			case <-tick:
				if o.Idle != nil {
					if err := o.Idle(); err != nil {
						return err
					}
				}
				lastWrite = clk.Now()
			case <-o.Stop:
				return ErrStopped
			case <-o.Gone:
				return ErrStopped
			case <-o.End:
				return ErrStopped
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

// offStack runs a source's reads on goroutines of their own, so that the
// follower's goroutine, which mostly waits, keeps a small stack: a pure-Go
// SQLite read grows its goroutine's stack to tens of KB, and a waiting
// goroutine keeps what it grew to until garbage collections shrink it.
type offStack struct{ Source }

func (o offStack) StreamRead(ctx context.Context, p *store.StreamReadParams) (*store.StreamReadResult, error) {
	type out struct {
		res *store.StreamReadResult
		err error
	}
	ch := make(chan out, 1)
	go func() { // ends with the read
		res, err := o.Source.StreamRead(ctx, p)
		ch <- out{res, err}
	}()
	r := <-ch
	return r.res, r.err
}
