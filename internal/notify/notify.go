// Package notify is an in-process publish/subscribe hub of coalesced signals. Store
// drivers publish a topic after each commit; waiters (Result, the worker's claim loop)
// subscribe instead of polling.
package notify

import (
	"context"
	"sync"
)

// Hub delivers signals by topic. The zero value is ready to use.
type Hub struct {
	mu    sync.Mutex
	subs  map[string]map[chan struct{}]struct{}
	feeds map[*Feed]struct{}
}

// Subscribe returns a channel that receives a signal after each Publish of topic
// (signals coalesce: the channel holds at most one), and a function that ends the
// subscription. The cancel function is idempotent.
func (h *Hub) Subscribe(topic string) (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = make(map[string]map[chan struct{}]struct{})
	}
	set := h.subs[topic]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		h.subs[topic] = set
	}
	set[ch] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if set := h.subs[topic]; set != nil {
				delete(set, ch)
				if len(set) == 0 {
					delete(h.subs, topic)
				}
			}
		})
	}
}

// SubscribeContext is Subscribe with a subscription that also ends when ctx ends.
func (h *Hub) SubscribeContext(ctx context.Context, topic string) (<-chan struct{}, func()) {
	ch, stop := h.Subscribe(topic)
	stopAfter := context.AfterFunc(ctx, stop)
	return ch, func() {
		stopAfter()
		stop()
	}
}

// Publish signals every subscriber of each topic without blocking.
func (h *Hub) Publish(topics ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, t := range topics {
		for ch := range h.subs[t] {
			signal(ch)
		}
		for f := range h.feeds {
			f.add(t)
		}
	}
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
