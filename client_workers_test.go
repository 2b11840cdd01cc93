package trellis_test

import (
	"slices"
	"testing"

	"github.com/trellis-dev/trellis"
)

// Workers lists the worker processes of the namespace with what they serve, and
// ServedWorkflows the union of the workflows of the live ones.
func TestClientWorkersListsLiveWorkers(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	wf := trellis.NewWorkflow("listed", func(wc *trellis.Context, n int) (int, error) { return n, nil })
	worker := open(t, url, func(c *trellis.Config) { c.Worker.Name = "w-listed" })
	register(t, worker, wf)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), worker, wf, 1))
	mustResult(t, h) // the worker is running, so its record exists
	reader := open(t, url, func(c *trellis.Config) { c.Worker.Disabled = true })
	ws := must[[]*trellis.WorkerRecord](t)(reader.Workers(ctxT(t)))
	if len(ws) != 1 || ws[0].Name != "w-listed" || !ws[0].Live || !slices.Contains(ws[0].Workflows, "listed") {
		t.Fatalf("Workers = %+v", ws)
	}
	names := must[[]string](t)(reader.ServedWorkflows(ctxT(t)))
	if !slices.Equal(names, []string{"listed"}) {
		t.Fatalf("ServedWorkflows = %v", names)
	}
}
