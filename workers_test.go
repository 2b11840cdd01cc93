package trellis_test

import (
	"testing"

	"github.com/trellis-dev/trellis"
)

// A run whose workflow no live worker serves (here: the worker was never told to
// Register it) says so in its wait reason instead of staying silently pending, and
// runs once a worker serves it.
func TestUnservedRunSaysSoInItsWaitReason(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	wf := trellis.NewWorkflow("forgotten", func(wc *trellis.Context, n int) (int, error) { return n + 1, nil })
	worker := open(t, url) // its workflows do not include wf
	starter := open(t, url, func(c *trellis.Config) { c.Worker.Disabled = true })
	register(t, starter, wf)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), starter, wf, 1))
	want := `no live worker serves workflow "forgotten"`
	if run := must[*trellis.Run](t)(starter.Get(ctxT(t), h.RunID())); run.Status != trellis.StatusPending || run.WaitReason != want {
		t.Fatalf("run is %s with wait reason %q, want pending with %q", run.Status, run.WaitReason, want)
	}
	page := must[*trellis.RunPage](t)(starter.List(ctxT(t), trellis.ListOptions{}))
	if len(page.Runs) != 1 || page.Runs[0].WaitReason != want {
		t.Fatalf("List: %+v", page.Runs)
	}
	register(t, worker, wf)
	if got := mustResult(t, h); got != 2 {
		t.Fatalf("result %d", got)
	}
}
