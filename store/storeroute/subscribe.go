package storeroute

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/trellis-dev/trellis/store"
)

// Subscribe implements store.Subscriber. A run's or its stream's topic is its
// namespace's store's. Any other topic (TopicReady, TopicCancel) is every
// store's: the router subscribes to each and forwards their signals, coalesced,
// into one channel. One goroutine per store forwards; all of them end when the
// subscription ends (the returned function, which waits for them) or ctx ends.
// When a store ends its own subscription (closes its channel), the merged one
// ends too: the others are stopped and the channel is closed, so that its
// reader subscribes again.
func (r *router) Subscribe(ctx context.Context, topic string) (<-chan struct{}, func(), error) {
	if ns, ok := topicNamespace(topic); ok {
		return r.storeFor(ns).Subscribe(ctx, topic)
	}
	if len(r.stores) == 1 {
		return r.control.Subscribe(ctx, topic)
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("subscribing: %w", err)
	}
	sctx, cancel := context.WithCancel(ctx)
	chans := make([]<-chan struct{}, 0, len(r.stores))
	stops := make([]func(), 0, len(r.stores))
	stopAll := func() {
		cancel()
		for _, stop := range stops {
			stop()
		}
	}
	for _, st := range r.stores {
		ch, stop, err := st.Subscribe(sctx, topic)
		if err != nil {
			stopAll()
			return nil, nil, err
		}
		chans, stops = append(chans, ch), append(stops, stop)
	}
	m := &merged{out: make(chan struct{}, 1), done: make(chan struct{})}
	m.forwarders.Add(len(chans))
	for _, ch := range chans {
		go m.forward(sctx, cancel, ch)
	}
	// The closer ends with the forwarders: it closes out only when a store
	// ended its subscription, never after the subscriber's own end.
	go func() {
		defer close(m.done)
		m.forwarders.Wait()
		if m.storeEnded.Load() {
			close(m.out)
		}
	}()
	var once sync.Once
	return m.out, func() {
		once.Do(func() {
			stopAll()
			<-m.done
		})
	}, nil
}

// merged is one merged subscription.
type merged struct {
	out        chan struct{}
	forwarders sync.WaitGroup
	done       chan struct{} // closed when the forwarders and the closer have ended
	storeEnded atomic.Bool
}

// forward copies ch's signals to m.out until ctx ends or ch closes; a closed
// ch ends every forwarder (cancel) and marks the subscription ended.
func (m *merged) forward(ctx context.Context, cancel func(), ch <-chan struct{}) {
	defer m.forwarders.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-ch:
			if !ok {
				m.storeEnded.Store(true)
				cancel()
				return
			}
			select {
			case m.out <- struct{}{}:
			default: // a signal is pending already: they coalesce
			}
		}
	}
}

var _ store.Subscriber = (*router)(nil)
