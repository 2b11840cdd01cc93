package trellis_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// Embedded: a paused queue keeps a started run pending, the worker runs it once
// the queue is resumed; a namespace's default queue and payload limit and a
// queue's priority apply to the runs started in them; a concurrency key is
// accepted; records are read back through the client.
func TestQueuesEmbedded(t *testing.T) {
	echo := trellis.NewWorkflow("q-echo", func(wc *trellis.Context, s string) (string, error) { return s, nil })
	c := setup(t, echo)
	ctx := ctxT(t)
	// The namespace default has its record from the start.
	if _, err := c.CreateNamespace(ctx, trellis.NamespaceOptions{Name: "default"}); !errors.Is(err, trellis.ErrNamespaceExists) {
		t.Fatalf("CreateNamespace(default): %v, want ErrNamespaceExists", err)
	}
	mainQ, limit := "main", 64
	if _, err := c.UpdateNamespace(ctx, trellis.NamespaceUpdate{Name: "default", DefaultQueue: &mainQ, PayloadLimit: &limit}); err != nil {
		t.Fatal(err)
	}
	five := 5
	if _, err := c.CreateQueue(ctx, "main", trellis.QueueSettings{Priority: &five}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PauseQueue(ctx, "main"); err != nil {
		t.Fatal(err)
	}
	h, err := trellis.Start(ctx, c, echo, "hi", trellis.StartOptions{ConcurrencyKey: "customer-1"})
	if err != nil {
		t.Fatal(err)
	}
	run, err := c.Get(ctx, h.RunID())
	if err != nil || run.Queue != "main" || run.Priority != 5 || run.Status != trellis.StatusPending {
		t.Fatalf("run in a paused queue = %+v, %v; want pending in main with priority 5", run, err)
	}
	time.Sleep(200 * time.Millisecond) // several polls of the worker
	if run, _ := c.Get(ctx, h.RunID()); run.Status != trellis.StatusPending {
		t.Fatalf("run in a paused queue is %s, want pending", run.Status)
	}
	if _, err := c.ResumeQueue(ctx, "main"); err != nil {
		t.Fatal(err)
	}
	if out := mustResult(t, h); out != "hi" {
		t.Fatalf("result %q", out)
	}
	// An explicit priority wins; the payload limit refuses a large input.
	h2, err := trellis.Start(ctx, c, echo, "x", trellis.StartOptions{Priority: 9})
	if err != nil {
		t.Fatal(err)
	}
	if run, _ := c.Get(ctx, h2.RunID()); run.Priority != 9 {
		t.Fatalf("explicit priority: %d", run.Priority)
	}
	if _, err := trellis.Start(ctx, c, echo, strings.Repeat("x", 100), trellis.StartOptions{}); !errors.Is(err, trellis.ErrPayloadTooLarge) {
		t.Fatalf("input over the namespace's limit: %v, want ErrPayloadTooLarge", err)
	}
	qs, err := c.ListQueues(ctx)
	if err != nil || len(qs) != 1 || qs[0].Paused || qs[0].Priority != 5 {
		t.Fatalf("ListQueues = %+v, %v", qs, err)
	}
	if _, err := c.ResumeQueue(ctx, "main"); !errors.Is(err, trellis.ErrQueueState) {
		t.Fatalf("resume of a queue not paused: %v, want ErrQueueState", err)
	}
}
