package engine

import (
	"sync"

	"github.com/trellis-dev/trellis/store"
)

// localRuns tracks the runs this client's worker is executing, so that Result and
// Wait in the same process learn a run's outcome from the executor that wrote it
// instead of reading it back from the store.
type localRuns struct {
	mu sync.Mutex
	m  map[string][]chan *store.Run // run ID -> waiters
}

// begin marks a run as executing here. Idempotent.
func (l *localRuns) begin(runID string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = make(map[string][]chan *store.Run)
	}
	if _, ok := l.m[runID]; !ok {
		l.m[runID] = nil
	}
}

// end marks a run as no longer executing here and hands its waiters the final
// state the executor committed, or nil when the run did not finish (it waits, was
// handed back, or its outcome could not be saved).
func (l *localRuns) end(runID string, final *store.Run) {
	l.mu.Lock()
	waiters := l.m[runID]
	delete(l.m, runID)
	l.mu.Unlock()
	for _, ch := range waiters {
		if final == nil {
			ch <- nil
			continue
		}
		r := *final
		ch <- &r
	}
}

// wait returns a channel that receives the run's outcome from end, if the run
// is executing here.
func (l *localRuns) wait(runID string) (<-chan *store.Run, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	waiters, ok := l.m[runID]
	if !ok {
		return nil, false
	}
	ch := make(chan *store.Run, 1)
	l.m[runID] = append(waiters, ch)
	return ch, true
}

// executing reports whether the run is executing here.
func (l *localRuns) executing(runID string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, ok := l.m[runID]
	return ok
}
