package trellis_test

import (
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/clock"
)

// With a fake Config.Clock, a run that sleeps a day and then waits an hour for an
// event finishes as soon as the test moves the clock: durable timers, the store's
// times and the worker's claim scheduling all read the one clock.
func TestFakeClockDrivesDurableTimers(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	wf := trellis.NewWorkflow("slow-day", func(wc *trellis.Context, _ int) (string, error) {
		if err := wc.Sleep(24 * time.Hour); err != nil {
			return "", err
		}
		_, err := trellis.WaitEvent[int](wc, "never", time.Hour)
		if !errors.Is(err, trellis.ErrEventTimeout) {
			return "", errors.New("want ErrEventTimeout")
		}
		return wc.Now().Format(time.RFC3339), nil
	})
	// The worker's log is printed if the test fails: with a fake clock, a claim
	// that failed, or a poll armed after the clock moved, waits for a move that
	// never comes (CI saw the run still asleep once, 27 Nov, on Postgres).
	var logs syncBuffer
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker log:\n%s", logs.String())
		}
	})
	c := open(t, storeURL(t), func(cfg *trellis.Config) {
		cfg.Clock = clk
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	register(t, c, wf)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, 0))
	waitStatus(t, c, h.RunID(), trellis.StatusWaiting)
	clk.Advance(24 * time.Hour)
	waitReason(t, c, h.RunID(), "waiting for event")
	clk.Advance(time.Hour)
	if got := mustResult(t, h); got != "2026-01-02T01:00:00Z" {
		t.Fatalf("finished at %s", got)
	}
}

// waitReason waits until the run waits with a reason that starts with prefix.
func waitReason(t *testing.T, c *trellis.Client, ref, prefix string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		run := must[*trellis.Run](t)(c.Get(ctxT(t), ref))
		if run.Status == trellis.StatusWaiting && len(run.WaitReason) >= len(prefix) && run.WaitReason[:len(prefix)] == prefix {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: %s %q, want waiting %q...", ref, run.Status, run.WaitReason, prefix)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
