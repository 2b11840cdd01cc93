package store_test

import (
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// NewRun is the run every SQL driver's create makes (and storepg predicts
// for a keyed start's response): pending, available at once unless the
// params say when, at its first workflow attempt, its times as the store
// keeps them, a seeded run at attempt 1; CreateClaim.Apply then claims it.
func TestNewRun(t *testing.T) {
	now := time.Date(2026, 12, 3, 8, 0, 0, 123456789, time.FixedZone("x", 3600))
	later, deadline := now.Add(time.Hour), now.Add(2*time.Hour)
	us := func(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
	retry := &store.RunRetry{MaxAttempts: 3}
	p := &store.RunCreateParams{Namespace: "ns", ID: "r", WorkflowID: "w", Workflow: "wf", Queue: "q", Priority: 2,
		Version: 3, Pinned: true, Input: []byte(`1`), TraceParent: "tp", Retry: retry}
	run := p.NewRun(now, us)
	switch {
	case run.Status != store.StatusPending, run.Attempts != 0, run.WorkflowAttempt != 1, !run.Pinned, run.Retry != retry,
		run.Namespace != "ns" || run.ID != "r" || run.WorkflowID != "w" || run.Workflow != "wf" || run.Queue != "q",
		run.Priority != 2 || run.Version != 3 || string(run.Input) != "1" || run.TraceParent != "tp":
		t.Fatalf("NewRun: %+v", run)
	case !run.CreatedAt.Equal(us(now)) || run.CreatedAt.Location() != time.UTC || run.CreatedAt.Nanosecond() != 123456000,
		!run.UpdatedAt.Equal(run.CreatedAt), !run.AvailableAt.Equal(run.CreatedAt), run.Deadline != nil:
		t.Fatalf("NewRun's times: created %v, updated %v, available %v, deadline %v", run.CreatedAt, run.UpdatedAt, run.AvailableAt, run.Deadline)
	}
	p.AvailableAt, p.Deadline, p.History = &later, &deadline, []*store.Op{{Position: 0, Done: true}}
	run = p.NewRun(now, nil)
	if !run.AvailableAt.Equal(later) || run.Deadline == nil || !run.Deadline.Equal(deadline) || run.Attempts != 1 ||
		run.CreatedAt != now {
		t.Fatalf("NewRun with an availability, a deadline and history, times as given: %+v", run)
	}
	p.AvailableAt, p.History = nil, nil
	run = p.NewRun(now, us)
	cr := (&store.CreateClaim{Worker: "w1", LeaseDuration: time.Minute}).Apply(run, run.CreatedAt)
	if run.Status != store.StatusRunning || run.Attempts != 1 || run.LeaseOwner != "w1" || cr.Run != run ||
		!run.StartedAt.Equal(run.CreatedAt) || !cr.LeaseExpiresAt.Equal(run.CreatedAt.Add(time.Minute)) {
		t.Fatalf("the run claimed: %+v, %+v", run, cr)
	}
}
