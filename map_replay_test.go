package trellis_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
)

// childCounter is a real store that counts RunChildren calls.
type childCounter struct {
	store.Store
	calls atomic.Int32
}

func (c *childCounter) RunChildren(ctx context.Context, p *store.RunChildrenParams) ([]*store.Run, error) {
	c.calls.Add(1)
	return c.Store.RunChildren(ctx, p)
}

// TestMapReplayReadsNoChildren: a Map's op records every item's outcome, so the
// parent's replays after it (here after a released sleep) read no child rows:
// the children are read once, when the group ends, whatever the item count.
func TestMapReplayReadsNoChildren(t *testing.T) {
	t.Parallel()
	item := trellis.NewWorkflow("map-replay-item", func(wc *trellis.Context, n int) (int, error) { return n * n, nil })
	parent := trellis.NewWorkflow("map-replay", func(wc *trellis.Context, n int) (int, error) {
		squares, err := trellis.Map(wc, item, make([]int, n))
		if err != nil {
			return 0, err
		}
		for i := range 3 { // each sleep releases the run: three replays past the Map
			if err := wc.Sleep(30*time.Millisecond + time.Duration(i)); err != nil {
				return 0, err
			}
		}
		return len(squares), nil
	})
	st := &childCounter{Store: openStore(t, storeURL(t))}
	c := open(t, "", func(cfg *trellis.Config) { cfg.Backend = st })
	register(t, c, parent, item)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, parent, 40))
	if got := mustResult(t, h); got != 40 {
		t.Fatalf("result %d", got)
	}
	if n := st.calls.Load(); n != 1 {
		t.Fatalf("RunChildren called %d times, want once (when the group ended)", n)
	}
}
