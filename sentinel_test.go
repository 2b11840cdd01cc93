package trellis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// TestSentinelsCrossTheClientBoundary: an event or approval timeout that ends a
// run, a child or a Map item is recognised with errors.Is by the caller of
// Result and by the parent workflow.
func TestSentinelsCrossTheClientBoundary(t *testing.T) {
	t.Parallel()
	waitEvent := trellis.NewWorkflow("sentinel-event", func(wc *trellis.Context, _ int) (int, error) {
		return trellis.WaitEvent[int](wc, "never", time.Millisecond)
	})
	waitApproval := trellis.NewWorkflow("sentinel-approval", func(wc *trellis.Context, _ int) (trellis.Decision, error) {
		return trellis.Approval(wc, "never", trellis.ApprovalOptions{Timeout: time.Millisecond})
	})
	parent := trellis.NewWorkflow("sentinel-parent", func(wc *trellis.Context, _ int) (string, error) {
		_, err := trellis.Child(wc, waitEvent, 0)
		var ce *trellis.ChildError
		if !errors.As(err, &ce) || !errors.Is(err, trellis.ErrEventTimeout) {
			return "child error: " + err.Error(), nil
		}
		_, err = trellis.Map(wc, waitEvent, []int{1, 2}, trellis.MapOptions{CollectErrors: true})
		var me *trellis.MapError
		if !errors.As(err, &me) || !errors.Is(err, trellis.ErrEventTimeout) || !errors.As(err, &ce) {
			return "map error: " + err.Error(), nil
		}
		return "ok", nil
	})
	c := setup(t, waitEvent, waitApproval, parent)
	ctx := ctxT(t)
	he := must[*trellis.Handle[int]](t)(trellis.Start(ctx, c, waitEvent, 0))
	if _, err := he.Result(ctx); !errors.Is(err, trellis.ErrEventTimeout) {
		t.Errorf("event timeout: Result error %v, want ErrEventTimeout", err)
	}
	ha := must[*trellis.Handle[trellis.Decision]](t)(trellis.Start(ctx, c, waitApproval, 0))
	if _, err := ha.Result(ctx); !errors.Is(err, trellis.ErrApprovalTimeout) {
		t.Errorf("approval timeout: Result error %v, want ErrApprovalTimeout", err)
	}
	hp := must[*trellis.Handle[string]](t)(trellis.Start(ctx, c, parent, 0))
	if got := mustResult(t, hp); got != "ok" {
		t.Errorf("parent: %s", got)
	}
}

// TestGetHandleAndClosed: GetHandle finds a run by workflow ID and knows both IDs;
// it refuses a run of another workflow; a closed client answers ErrClosed.
func TestGetHandleAndClosed(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("handle", func(wc *trellis.Context, n int) (int, error) { return n, nil })
	other := trellis.NewWorkflow("handle-other", func(wc *trellis.Context, n int) (int, error) { return n, nil })
	c, err := trellis.Open(ctxT(t), trellis.Config{Store: storeURL(t)})
	if err != nil {
		t.Fatal(err)
	}
	register(t, c, wf, other)
	ctx := ctxT(t)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctx, c, wf, 7, trellis.StartOptions{ID: "h-1"}))
	got, err := trellis.GetHandle(ctx, c, wf, "h-1")
	if err != nil || got.ID() != "h-1" || got.RunID() != h.RunID() {
		t.Fatalf("GetHandle(h-1) = %+v, %v; want IDs h-1 and %s", got, err, h.RunID())
	}
	if n := mustResult(t, got); n != 7 {
		t.Fatalf("result %d", n)
	}
	if _, err := trellis.GetHandle(ctx, c, other, "h-1"); !errors.Is(err, trellis.ErrInvalidParams) {
		t.Fatalf("GetHandle of another workflow's run: %v, want ErrInvalidParams", err)
	}
	if _, err := trellis.GetHandle(ctx, c, wf, "nope"); !errors.Is(err, trellis.ErrRunNotFound) {
		t.Fatalf("GetHandle of no run: %v, want ErrRunNotFound", err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(context.Background(), "h-1"); !errors.Is(err, trellis.ErrClosed) {
		t.Errorf("Get after Close: %v, want ErrClosed", err)
	}
	if _, err := trellis.Start(context.Background(), c, wf, 1); !errors.Is(err, trellis.ErrClosed) {
		t.Errorf("Start after Close: %v, want ErrClosed", err)
	}
}
