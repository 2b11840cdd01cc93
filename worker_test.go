package trellis_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// TestWorkerApartFromClient: a Worker runs a workflow that a client holding no
// workflow code starts by name; cancelling Run's context stops the worker cleanly
// (goleak checks its goroutines at the end of the package's tests).
func TestWorkerApartFromClient(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	wf := trellis.NewWorkflow("apart", func(wc *trellis.Context, n int) (int, error) {
		return trellis.Step(wc, "double", func(context.Context) (int, error) { return 2 * n, nil })
	})
	w, err := trellis.NewWorker(ctxT(t), trellis.Config{Store: url, Worker: trellis.WorkerOptions{PollInterval: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(ctxT(t), wf); err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()

	producer := open(t, url, func(cfg *trellis.Config) { cfg.Worker.Disabled = true })
	in, _ := json.Marshal(21)
	run, err := producer.StartRaw(ctxT(t), "apart", in, trellis.StartOptions{})
	if err != nil {
		t.Fatalf("StartRaw: %v", err)
	}
	got := must[*trellis.Run](t)(producer.Wait(ctxT(t), run.ID))
	if got.Status != trellis.StatusSucceeded || string(got.Output) != "42" {
		t.Fatalf("run ended %s with %s, want succeeded with 42", got.Status, got.Output)
	}
	stop()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run returned %v, want nil after a graceful stop", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return after its context ended")
	}
	if _, err := trellis.NewWorker(ctxT(t), trellis.Config{Store: url, Worker: trellis.WorkerOptions{Disabled: true}}); err == nil {
		t.Fatal("NewWorker with Worker.Disabled: want an error")
	}
}
