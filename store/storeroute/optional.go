package storeroute

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// counting is the optional capabilities a router offers when every store
// offers them all (see the package doc).
type counting interface {
	store.RunCounter
	store.QueueCounter
	store.WorkerCounter
	store.RunWatcher
	store.CommitObserver
}

// countingRouter is a router whose stores are all counting.
type countingRouter struct{ *router }

// foreignRouter is a countingRouter whose stores are all ForeignCommits too.
type foreignRouter struct {
	countingRouter
	marks foreignMarks
}

var (
	_ store.Store          = (*router)(nil)
	_ counting             = countingRouter{}
	_ store.ForeignCommits = (*foreignRouter)(nil)
)

// withCapabilities returns r as the type that offers what all its stores offer.
func (r *router) withCapabilities() store.Store {
	for _, st := range r.stores {
		if _, ok := st.(counting); !ok {
			return r
		}
	}
	for _, st := range r.stores {
		if _, ok := st.(store.ForeignCommits); !ok {
			return countingRouter{r}
		}
	}
	return &foreignRouter{countingRouter: countingRouter{r}}
}

// RunCounts implements store.RunCounter: the namespace's store counts.
func (r countingRouter) RunCounts(ctx context.Context, p *store.RunCountsParams) (*store.RunCountsResult, error) {
	return r.storeFor(p.Namespace).(store.RunCounter).RunCounts(ctx, p)
}

// QueueCounts implements store.QueueCounter: every store's counts of the
// namespaces it holds.
func (r countingRouter) QueueCounts(ctx context.Context) ([]store.QueueCount, error) {
	var out []store.QueueCount
	for _, st := range r.stores {
		counts, err := st.(store.QueueCounter).QueueCounts(ctx)
		if err != nil {
			return nil, err
		}
		for _, c := range counts {
			if r.holds(st, c.Namespace) {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// WorkerCounts implements store.WorkerCounter: every store's counts of the
// namespaces it holds.
func (r countingRouter) WorkerCounts(ctx context.Context) ([]store.WorkerCount, error) {
	var out []store.WorkerCount
	for _, st := range r.stores {
		counts, err := st.(store.WorkerCounter).WorkerCounts(ctx)
		if err != nil {
			return nil, err
		}
		for _, c := range counts {
			if r.holds(st, c.Namespace) {
				out = append(out, c)
			}
		}
	}
	return out, nil
}

// WatchRuns implements store.RunWatcher: the namespace's store's feed.
func (r countingRouter) WatchRuns(namespace string) (store.RunFeed, bool) {
	return r.storeFor(namespace).(store.RunWatcher).WatchRuns(namespace)
}

// ObserveCommits implements store.CommitObserver: f observes every store's
// batches, until stop.
func (r countingRouter) ObserveCommits(f func(requests int, elapsed time.Duration)) (stop func()) {
	stops := make([]func(), 0, len(r.stores))
	for _, st := range r.stores {
		stops = append(stops, st.(store.CommitObserver).ObserveCommits(f))
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, s := range stops {
				s()
			}
		})
	}
}

// ForeignCommitMark implements store.ForeignCommits: a count of the changes
// seen in the stores' marks. It changes whenever one store's mark has changed
// since the last reading (by anyone), so it never stays the same across a
// commit that changed one.
func (r *foreignRouter) ForeignCommitMark(ctx context.Context) (int64, error) {
	marks := make([]int64, len(r.stores))
	for i, st := range r.stores {
		m, err := st.(store.ForeignCommits).ForeignCommitMark(ctx)
		if err != nil {
			return 0, err
		}
		marks[i] = m
	}
	return r.marks.observe(marks), nil
}

// foreignMarks turns the stores' marks into one: a counter of the readings
// that differed from the reading before them.
type foreignMarks struct {
	mu    sync.Mutex
	last  []int64
	count int64
}

func (f *foreignMarks) observe(marks []int64) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.last != nil && !slices.Equal(f.last, marks) {
		f.count++
	}
	f.last = marks
	return f.count
}
