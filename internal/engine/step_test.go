package engine

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// The next owner of a run enforces a step's total timeout from the first
// attempt's start recorded in history: the step fails without another attempt.
func TestTotalTimeoutIsEnforcedFromRecordedStart(t *testing.T) {
	t.Parallel()
	ran := false
	var got *store.Op
	e, ms, clk := setup(t, func(rs *RunState) (any, error) {
		got = rs.Step("charge", func(context.Context) (any, error) { ran = true; return 1, nil },
			StepOptions{MaxAttempts: 10, Backoff: fixed(time.Second), TotalTimeout: 30 * time.Minute}, false)
		return nil, nil
	})
	clk.Advance(time.Hour)
	inProgress := &store.Op{Position: 0, Kind: store.OpStep, Name: "charge", Attempts: 2, StartedAt: epoch}
	execute(e, context.Background(), claimed(inProgress))
	if ran {
		t.Fatal("an attempt ran past the step's total timeout")
	}
	if got == nil || got.Error == nil || got.Error.Type != TypeTotalTimeout || !got.Error.NonRetryable {
		t.Fatalf("step op %+v, want a total timeout", got)
	}
	if p := ms.last(t); p.Status != store.StatusSucceeded {
		t.Fatalf("run %s", p.Status)
	}
}

// A step with a total timeout records its start before its first attempt.
func TestTotalTimeoutRecordsTheFirstStart(t *testing.T) {
	t.Parallel()
	e, ms, _ := setup(t, func(rs *RunState) (any, error) {
		rs.Step("charge", stepOf(1), StepOptions{MaxAttempts: 1, Backoff: fixed(0), TotalTimeout: time.Minute}, false)
		return nil, nil
	})
	execute(e, context.Background(), claimed())
	ms.mu.Lock()
	defer ms.mu.Unlock()
	first := ms.saved[0]
	if first.Status != store.StatusRunning || len(first.Ops) != 1 || first.Ops[0].Done || !first.Ops[0].StartedAt.Equal(epoch) {
		t.Fatalf("first checkpoint %s %+v, want the step's start", first.Status, first.Ops)
	}
}

// A backoff that would end past the total timeout fails the step at once.
func TestTotalTimeoutEndsRetriesBeforeALongBackoff(t *testing.T) {
	t.Parallel()
	attempts := 0
	var got *store.Op
	e, _, _ := setup(t, func(rs *RunState) (any, error) {
		got = rs.Step("flaky", func(context.Context) (any, error) { attempts++; return nil, errors.New("down") },
			StepOptions{MaxAttempts: 10, Backoff: fixed(time.Hour), TotalTimeout: time.Minute}, false)
		return nil, nil
	})
	execute(e, context.Background(), claimed())
	if attempts != 1 || got == nil || got.Error == nil || got.Error.Type != TypeTotalTimeout {
		t.Fatalf("%d attempts, op %+v", attempts, got)
	}
	if !errors.Is(ErrStepTotalTimeout, ErrStepTimeout) {
		t.Fatal("ErrStepTotalTimeout is not an ErrStepTimeout")
	}
}

// Retry backoffs in place wait on the engine's clock: a fake clock moved by the
// test wakes them.
func TestInlineBackoffWaitsOnTheClock(t *testing.T) {
	t.Parallel()
	attempts := 0
	var got *store.Op
	e, _, clk := setup(t, func(rs *RunState) (any, error) {
		got = rs.Step("flaky", func(context.Context) (any, error) {
			if attempts++; attempts < 3 {
				return nil, errors.New("down")
			}
			return "up", nil
		}, StepOptions{MaxAttempts: 5, Backoff: fixed(time.Second)}, false)
		return nil, nil
	})
	done := make(chan struct{})
	go func() { defer close(done); execute(e, context.Background(), claimed()) }()
	for finished := false; !finished; {
		added := clk.TimerAdded()
		if clk.Timers() > 0 {
			clk.Advance(time.Second)
			continue
		}
		select {
		case <-done:
			finished = true
		case <-added:
		}
	}
	if attempts != 3 || got == nil || got.Error != nil || string(got.Result) != `"up"` {
		t.Fatalf("%d attempts, op %+v", attempts, got)
	}
	if now := clk.Now(); !now.Equal(epoch.Add(2 * time.Second)) {
		t.Fatalf("clock at %v, want two backoffs after the start", now)
	}
}

// A queue's backoff doubles from Initial up to Max, and replaces only what the
// step left to the defaults.
func TestQueueRetryOptions(t *testing.T) {
	b := QueueBackoff{Initial: time.Second, Max: 5 * time.Second}
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 5 * time.Second, 40: 5 * time.Second} {
		if got := b.Delay(n); got != want {
			t.Errorf("Delay(%d) = %s, want %s", n, got, want)
		}
	}
	if got := (QueueBackoff{Initial: time.Millisecond}).Delay(11); got != 1024*time.Millisecond {
		t.Errorf("uncapped Delay(11) = %s", got)
	}
	q := &store.QueueRetry{MaxAttempts: 7, InitialBackoff: store.Duration(time.Second)}
	def := StepOptions{MaxAttempts: 3, Backoff: fixed(time.Minute), AttemptsDefault: true, BackoffDefault: true}
	if o := def.withQueue(q); o.MaxAttempts != 7 || o.Backoff.Delay(1) != time.Second {
		t.Errorf("defaults with the queue's policy: %+v", o)
	}
	own := StepOptions{MaxAttempts: 2, Backoff: fixed(time.Minute)}
	if o := own.withQueue(q); o.MaxAttempts != 2 || o.Backoff.Delay(1) != time.Minute {
		t.Errorf("the step's own policy was replaced: %+v", o)
	}
	if o := def.withQueue(&store.QueueRetry{MaxAttempts: 5}); o.MaxAttempts != 5 || o.Backoff.Delay(1) != time.Minute {
		t.Errorf("a queue without a backoff changed the backoff: %+v", o)
	}
}
