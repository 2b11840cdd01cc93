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

// Once Register returns, the worker's record lists the workflow: another process
// sees it served at once, before any claim of this worker, and may create a
// schedule of it (refused for a workflow no live worker serves).
func TestRegisterRecordsTheWorkerBeforeReturning(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	reader := open(t, url, func(c *trellis.Config) { c.Worker.Disabled = true })
	for i := range 5 {
		name := "announced-" + string(rune('a'+i))
		wf := trellis.NewWorkflow(name, func(wc *trellis.Context, n int) (int, error) { return n, nil })
		worker := open(t, url, func(c *trellis.Config) { c.Worker.Name = "w-" + name })
		register(t, worker, wf)
		names := must[[]string](t)(reader.ServedWorkflows(ctxT(t)))
		if !slices.Contains(names, name) {
			t.Fatalf("right after Register, ServedWorkflows = %v, want %s among them", names, name)
		}
		if _, err := reader.StartRaw(ctxT(t), name, []byte("1"), trellis.StartOptions{}); err != nil {
			t.Fatalf("a start from another client right after Register: %v", err)
		}
		if _, err := reader.CreateSchedule(ctxT(t), "s-"+name, trellis.ScheduleSpec{Workflow: name, Cron: "@daily", Input: trellis.Payload("1")}); err != nil {
			t.Fatalf("a schedule created by another client right after Register: %v", err)
		}
	}
}
