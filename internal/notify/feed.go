package notify

import (
	"strings"
	"sync"
)

// Feed collects the topics published with one prefix, without losing any: where a
// subscription only says that its topic changed, a feed says which topics did, so
// one reader follows any number of them (the client's results watcher follows
// every run topic of its namespace this way).
type Feed struct {
	h      *Hub
	prefix string
	c      chan struct{}

	mu  sync.Mutex
	got map[string]struct{} // suffixes published since the last Take
	all bool                // MarkAll since the last Take
}

// Feed starts collecting the topics published with prefix. Stop ends it.
func (h *Hub) Feed(prefix string) *Feed {
	f := &Feed{h: h, prefix: prefix, c: make(chan struct{}, 1), got: make(map[string]struct{})}
	h.mu.Lock()
	if h.feeds == nil {
		h.feeds = make(map[*Feed]struct{})
	}
	h.feeds[f] = struct{}{}
	h.mu.Unlock()
	return f
}

// MarkAll tells every feed that topics may have been published unseen (e.g. a
// lost connection to the database's notifications): their readers re-check
// everything they follow.
func (h *Hub) MarkAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for f := range h.feeds {
		f.mu.Lock()
		f.all = true
		f.mu.Unlock()
		signal(f.c)
	}
}

func (f *Feed) add(topic string) {
	suffix, ok := strings.CutPrefix(topic, f.prefix)
	if !ok {
		return
	}
	f.mu.Lock()
	f.got[suffix] = struct{}{}
	f.mu.Unlock()
	signal(f.c)
}

// Changed receives a (coalesced) signal when Take has something new.
func (f *Feed) Changed() <-chan struct{} { return f.c }

// Take returns and forgets the suffixes (after the prefix) of the topics
// published since the last Take, and whether MarkAll was called since.
func (f *Feed) Take() (suffixes []string, all bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	suffixes = make([]string, 0, len(f.got))
	for s := range f.got {
		suffixes = append(suffixes, s)
	}
	clear(f.got)
	all, f.all = f.all, false
	return suffixes, all
}

// Stop ends the feed. Idempotent.
func (f *Feed) Stop() {
	f.h.mu.Lock()
	delete(f.h.feeds, f)
	f.h.mu.Unlock()
}
