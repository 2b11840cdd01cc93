package streams

import (
	"context"
	"reflect"
	"sync"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// A foreignWatch polls a store whose wake-ups miss other processes' commits, on
// behalf of every follower of that store in this process that polls at the same
// interval: one goroutine and one timer, instead of a timer per follower that
// woke each follower every poll (10,000 idle SSE streams: 10,000 wake-ups a
// second). At each poll that must read (store.ForeignPoll: a ForeignCommits
// store's mark changed; any other store, always) it closes the channel that
// changed returned, so that the followers holding it read again.
//
// A follower takes the channel before it reads the store: a commit after that
// read changes the mark after the poll that last read it, so a later poll
// closes that channel.
type foreignWatch struct {
	key    watchKey
	shared bool // in watches (its store can be a map key)
	every  time.Duration
	users  int // guarded by watches.mu

	mu sync.Mutex
	ch chan struct{} // closed at the next poll that must read

	ctx    context.Context // ends when the last follower releases the watch
	cancel context.CancelFunc
	done   chan struct{}
}

type watchKey struct {
	src   any
	every time.Duration
}

// watches holds the foreignWatch of each store and interval while it has
// followers; the last follower to release it stops its goroutine.
var watches = struct {
	mu sync.Mutex
	m  map[watchKey]*foreignWatch
}{m: map[watchKey]*foreignWatch{}}

// acquireWatch returns the watch of src polled every interval, started for the
// first follower; release it when done. A store value that cannot be a map key
// gets a watch of its own.
func acquireWatch(src any, every time.Duration) *foreignWatch {
	key := watchKey{src: src, every: every}
	shared := reflect.ValueOf(src).Comparable()
	watches.mu.Lock()
	defer watches.mu.Unlock()
	if shared {
		if w := watches.m[key]; w != nil {
			w.users++
			return w
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &foreignWatch{key: key, shared: shared, every: every, users: 1, ch: make(chan struct{}),
		ctx: ctx, cancel: cancel, done: make(chan struct{})}
	if shared {
		watches.m[key] = w
	}
	go w.run(store.NewForeignPoll(src)) // ends when the last user releases the watch
	return w
}

// release ends a follower's use of the watch; the last one stops it and waits
// for its goroutine.
func (w *foreignWatch) release() {
	watches.mu.Lock()
	w.users--
	last := w.users == 0
	if last && w.shared { // (a lookup with an unhashable key would panic)
		delete(watches.m, w.key)
	}
	watches.mu.Unlock()
	if last {
		w.cancel()
		<-w.done
	}
}

// changed returns a channel closed at the next poll that must read.
func (w *foreignWatch) changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ch
}

func (w *foreignWatch) run(poll store.ForeignPoll) {
	defer close(w.done)
	t := time.NewTicker(w.every)
	defer t.Stop()
	for {
		select {
		case <-w.ctx.Done():
			return
		case <-t.C:
			if !poll.Due(w.ctx) {
				continue
			}
			w.mu.Lock()
			close(w.ch)
			w.ch = make(chan struct{})
			w.mu.Unlock()
		}
	}
}
