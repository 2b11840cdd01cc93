package storetest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// Workflow retries (store/retry.go): a checkpoint that fails a run with a
// retry policy left makes it wait for its next attempt.
var workflowRetryCases = []testCase{
	{"StoredPolicy", retryStoredPolicy},
	{"WorkerPolicy", retryWorkerPolicy},
	{"NotRetried", retryNotRetried},
	{"CancelDuringBackoff", retryCancelDuringBackoff},
	{"BadPolicy", retryBadPolicy},
	{"Batch", retryBatch},
}

func withRetry(r *store.RunRetry) runOpt { return func(p *store.RunCreateParams) { p.Retry = r } }

var boom = &store.ErrorInfo{Message: "charge: card service down", Type: "*app.Unavailable"}

// failStep checkpoints, under cr, step "charge" at position 1 failing its
// attempts from..to (its last attempt ends it failed), after a succeeded step
// at position 0 when from is 1 in the run's first attempt.
func (e *env) failStep(cr *store.ClaimedRun, from, to int, first bool) {
	e.t.Helper()
	p := store.CheckpointParams{Status: store.StatusRunning}
	if first {
		fin := e.clk.Now()
		p.Ops = append(p.Ops, &store.Op{Position: 0, Kind: store.OpStep, Name: "lookup", Done: true,
			Result: []byte(`"ok"`), Attempts: 1, StartedAt: fin, FinishedAt: &fin})
	}
	started := e.clk.Now()
	for a := from; a <= to; a++ {
		t0 := e.clk.Now()
		t1 := e.clk.Advance(time.Second)
		p.Attempts = append(p.Attempts, store.Attempt{Position: 1, Attempt: a, Error: *boom, StartedAt: t0, FinishedAt: t1})
	}
	fin := e.clk.Now()
	p.Ops = append(p.Ops, &store.Op{Position: 1, Kind: store.OpStep, Name: "charge", Done: true, Error: boom,
		Attempts: to, StartedAt: started, FinishedAt: &fin})
	e.checkpoint(cr, p)
}

// failRun checkpoints cr failed with boom (and run.failed), with policy sent.
func (e *env) failRun(cr *store.ClaimedRun, policy *store.RunRetry) *store.CheckpointResult {
	e.t.Helper()
	return e.checkpoint(cr, store.CheckpointParams{Status: store.StatusFailed, Error: boom, Retry: policy,
		Stream: []store.StreamWrite{store.FinalEvent(store.StatusFailed, nil, boom)}})
}

func retryStoredPolicy(t *testing.T, e *env) {
	policy := &store.RunRetry{MaxAttempts: 3, InitialBackoff: store.Duration(10 * time.Second), Factor: 2}
	r := e.create(withRetry(policy))
	if r.WorkflowAttempt != 1 || r.Retry == nil || r.Retry.MaxAttempts != 3 {
		t.Fatalf("created run: workflow attempt %d, retry %+v; want 1 and the policy", r.WorkflowAttempt, r.Retry)
	}
	cr := e.claimOne(r.ID)
	if cr.Run.WorkflowAttempt != 1 || cr.Run.Retry == nil || cr.Run.PriorAttempts(1) != 0 {
		t.Fatalf("claimed run: workflow attempt %d, retry %+v", cr.Run.WorkflowAttempt, cr.Run.Retry)
	}
	e.failStep(cr, 1, 2, true)
	failedAt := e.clk.Now()
	res := e.failRun(cr, nil)
	retryAt := failedAt.Add(10 * time.Second)
	if res.RetryAt == nil {
		t.Fatalf("checkpoint result %+v: no RetryAt, want a retry", res)
	}
	wantTime(t, "RetryAt", *res.RetryAt, retryAt)

	w := e.wantStatus(r.ID, store.StatusWaiting)
	if w.Error != nil || w.FinishedAt != nil || w.WorkflowAttempt != 2 || len(w.WorkflowAttempts) != 1 {
		t.Fatalf("retried run: error %+v, finished %v, workflow attempt %d, attempts %+v", w.Error, w.FinishedAt,
			w.WorkflowAttempt, w.WorkflowAttempts)
	}
	if !strings.Contains(w.WaitReason, "attempt 1 failed") || !strings.Contains(w.WaitReason, "attempt 2 at") {
		t.Fatalf("wait reason %q: want the failed attempt and the next one", w.WaitReason)
	}
	wantTime(t, "AvailableAt", w.AvailableAt, retryAt)
	a := w.WorkflowAttempts[0]
	if a.Attempt != 1 || a.Error != *boom || len(a.Steps) != 1 || a.Steps[0] != (store.RetriedStep{Position: 1, Name: "charge", Attempts: 2}) {
		t.Fatalf("run attempt = %+v, want attempt 1 with its error and step charge (2 attempts)", a)
	}
	wantTime(t, "attempt StartedAt", a.StartedAt, *cr.Run.StartedAt)
	wantTime(t, "attempt FailedAt", a.FailedAt, failedAt)
	wantTime(t, "attempt RetryAt", a.RetryAt, retryAt)

	// What runs again: the failed step is in progress, its attempts kept; the
	// step that succeeded is as it was.
	ops := e.history(r.ID)
	if len(ops) != 2 || !ops[0].Done || ops[0].Error != nil {
		t.Fatalf("history = %+v, want the succeeded step done", ops)
	}
	if s := ops[1]; s.Done || s.Error != nil || s.FinishedAt != nil || s.Attempts != 2 || len(s.AttemptLog) != 2 {
		t.Fatalf("failed step after the retry = %+v, want in progress with its 2 failed attempts", s)
	}
	wantTime(t, "reset step StartedAt", ops[1].StartedAt, retryAt)
	wantStream(t, e.streamRead(r.ID, 0, 10), 1, "run.waiting")
	ev := e.streamRead(r.ID, 0, 10).Events[0]
	if !strings.Contains(string(ev.Data), `"retry":{"attempt":1,`) || !strings.Contains(string(ev.Data), `"wake_at"`) ||
		!strings.Contains(string(ev.Data), boom.Message) || !strings.Contains(string(ev.Data), `"reason":"workflow retry`) {
		t.Fatalf("run.waiting data = %s", ev.Data)
	}

	// Not due before the backoff has passed.
	e.wantNoClaim()
	e.clk.Set(retryAt)
	cr2 := e.claimOne(r.ID)
	if cr2.Run.WorkflowAttempt != 2 || cr2.Run.PriorAttempts(1) != 2 || cr2.Run.PriorAttempts(0) != 0 {
		t.Fatalf("claimed retry: workflow attempt %d, prior attempts of the step %d", cr2.Run.WorkflowAttempt, cr2.Run.PriorAttempts(1))
	}
	if len(cr2.History) != 2 || cr2.History[1].Done || cr2.History[1].Attempts != 2 {
		t.Fatalf("claimed history = %+v", cr2.History)
	}

	// The second attempt's step fails attempts 3 and 4: retried again, after
	// twice the backoff.
	e.failStep(cr2, 3, 4, false)
	failed2 := e.clk.Now()
	res = e.failRun(cr2, nil)
	if res.RetryAt == nil {
		t.Fatal("second failure: not retried")
	}
	wantTime(t, "second RetryAt", *res.RetryAt, failed2.Add(20*time.Second))
	w = e.wantStatus(r.ID, store.StatusWaiting)
	if w.WorkflowAttempt != 3 || len(w.WorkflowAttempts) != 2 || w.WorkflowAttempts[1].Steps[0].Attempts != 4 {
		t.Fatalf("after the second failure: %+v", w.WorkflowAttempts)
	}
	wantTime(t, "second attempt StartedAt", w.WorkflowAttempts[1].StartedAt, retryAt)
	if ops := e.history(r.ID); len(ops[1].AttemptLog) != 4 {
		t.Fatalf("step attempt log = %+v, want its 4 attempts", ops[1].AttemptLog)
	}

	// The third attempt is the last: its failure fails the run.
	e.clk.Set(*res.RetryAt)
	cr3 := e.claimOne(r.ID)
	if cr3.Run.PriorAttempts(1) != 4 {
		t.Fatalf("third attempt: prior attempts %d, want 4", cr3.Run.PriorAttempts(1))
	}
	e.failStep(cr3, 5, 5, false)
	if res := e.failRun(cr3, nil); res.RetryAt != nil {
		t.Fatalf("last attempt's failure retried: %+v", res)
	}
	f := e.wantFinished(cr3, store.StatusFailed)
	if f.Error == nil || *f.Error != *boom || f.WorkflowAttempt != 3 || len(f.WorkflowAttempts) != 2 {
		t.Fatalf("failed run: error %+v, workflow attempt %d", f.Error, f.WorkflowAttempt)
	}
	if ops := e.history(r.ID); !ops[1].Done || ops[1].Error == nil || ops[1].Attempts != 5 {
		t.Fatalf("failed step = %+v, want done, failed, 5 attempts", ops[1])
	}
	wantStream(t, e.streamRead(r.ID, 0, 10), 1, "run.waiting", "run.waiting", "run.failed")
}

// retryWorkerPolicy: without a policy of its own, a run is retried by the one
// its failing checkpoint carries; without either, it fails.
func retryWorkerPolicy(t *testing.T, e *env) {
	cr := e.start()
	res := e.failRun(cr, &store.RunRetry{MaxAttempts: 2, InitialBackoff: store.Duration(time.Minute)})
	if res.RetryAt == nil {
		t.Fatal("not retried by the checkpoint's policy")
	}
	w := e.wantStatus(cr.Run.ID, store.StatusWaiting)
	if w.Retry != nil || w.WorkflowAttempt != 2 || len(w.WorkflowAttempts[0].Steps) != 0 {
		t.Fatalf("retried run: retry %+v (the worker's policy is not the run's), attempt %d, %+v", w.Retry, w.WorkflowAttempt, w.WorkflowAttempts)
	}
	e.clk.Advance(time.Minute)
	cr2 := e.claimOne(cr.Run.ID)
	if res := e.failRun(cr2, &store.RunRetry{MaxAttempts: 2}); res.RetryAt != nil {
		t.Fatal("retried past MaxAttempts")
	}
	e.wantFinished(cr2, store.StatusFailed)

	// The run's own policy wins over the worker's.
	cr = e.start(withRetry(&store.RunRetry{MaxAttempts: 1}))
	if res := e.failRun(cr, &store.RunRetry{MaxAttempts: 5}); res.RetryAt != nil {
		t.Fatal("a run started with MaxAttempts 1 was retried by the worker's policy")
	}
	e.wantFinished(cr, store.StatusFailed)

	cr = e.start()
	if res := e.failRun(cr, nil); res.RetryAt != nil {
		t.Fatal("a run without a policy was retried")
	}
	r := e.wantFinished(cr, store.StatusFailed)
	if r.WorkflowAttempt != 1 || r.WorkflowAttempts != nil {
		t.Fatalf("failed run without retries: attempt %d, %+v", r.WorkflowAttempt, r.WorkflowAttempts)
	}
}

// retryNotRetried: errors that are not retried, and runs that cannot be.
func retryNotRetried(t *testing.T, e *env) {
	policy := &store.RunRetry{MaxAttempts: 5, NonRetryableTypes: []string{"*app.Declined"}}
	for _, bad := range []*store.ErrorInfo{
		{Message: "declined", Type: "*app.Declined"},
		{Message: "bad input", Type: "*app.Bad", NonRetryable: true},
		{Message: "run deadline exceeded", Type: "deadline_exceeded"},
		{Message: "output too large", Type: "payload_too_large", NonRetryable: true},
	} {
		cr := e.start()
		res := e.checkpoint(cr, store.CheckpointParams{Status: store.StatusFailed, Error: bad, Retry: policy})
		if res.RetryAt != nil {
			t.Fatalf("error %+v was retried", bad)
		}
		e.wantFinished(cr, store.StatusFailed)
	}
	// A deadline before the retry's time.
	dl := e.clk.Now().Add(30 * time.Second)
	cr := e.start(func(p *store.RunCreateParams) { p.Deadline = &dl })
	if res := e.failRun(cr, &store.RunRetry{MaxAttempts: 3, InitialBackoff: store.Duration(time.Minute)}); res.RetryAt != nil {
		t.Fatal("retried after the run's deadline")
	}
	e.wantFinished(cr, store.StatusFailed)
	// A cancellation requested while it ran.
	cr = e.start()
	e.cancel(cr.Run.ID)
	if res := e.failRun(cr, policy); res.RetryAt != nil {
		t.Fatal("a run whose cancellation was requested was retried")
	}
	e.wantFinished(cr, store.StatusFailed)
	// An at-most-once step's unknown outcome is not retried, and such a step
	// is not run again by the retry of another failure.
	cr = e.start()
	unknown := &store.ErrorInfo{Message: "outcome unknown", Type: "step_outcome_unknown"}
	if res := e.checkpoint(cr, store.CheckpointParams{Status: store.StatusFailed, Error: unknown, Retry: policy}); res.RetryAt != nil {
		t.Fatal("an unknown outcome was retried")
	}
	cr = e.start()
	now := e.clk.Now()
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{
		{Position: 0, Kind: store.OpStep, Name: "pay", Done: true, Error: unknown, Attempts: 1, StartedAt: now, FinishedAt: &now}}})
	e.failStep(cr, 1, 1, false)
	if res := e.failRun(cr, &store.RunRetry{MaxAttempts: 2}); res.RetryAt == nil {
		t.Fatal("not retried")
	}
	if ops := e.history(cr.Run.ID); !ops[0].Done || ops[0].Error == nil || ops[1].Done {
		t.Fatalf("after the retry: %+v %+v, want pay kept failed and charge in progress", ops[0], ops[1])
	}
	// A stale lease writes nothing.
	cr = e.start(withRetry(policy))
	err := e.checkpointErr(&store.ClaimedRun{Run: cr.Run, LeaseToken: cr.LeaseToken - 1},
		store.CheckpointParams{Status: store.StatusFailed, Error: boom})
	wantErr(t, "a stale lease's failure", err, store.ErrLeaseLost)
	if r := e.wantStatus(cr.Run.ID, store.StatusRunning); r.WorkflowAttempt != 1 {
		t.Fatalf("after a stale failure: workflow attempt %d", r.WorkflowAttempt)
	}
}

// retryCancelDuringBackoff: a run waiting for its retry is cancelled as any
// waiting run.
func retryCancelDuringBackoff(t *testing.T, e *env) {
	cr := e.start(withRetry(&store.RunRetry{MaxAttempts: 3, InitialBackoff: store.Duration(time.Hour)}))
	e.failStep(cr, 1, 1, true)
	if res := e.failRun(cr, nil); res.RetryAt == nil {
		t.Fatal("not retried")
	}
	c := e.cancel(cr.Run.ID)
	if !c.CancelRequested || c.Status != store.StatusPending {
		t.Fatalf("cancelled during the backoff: %+v, want pending with its cancellation", c)
	}
	cr2 := e.claimOne(cr.Run.ID)
	e.checkpoint(cr2, store.CheckpointParams{Status: store.StatusCancelled, Error: &store.ErrorInfo{Message: "run cancelled", Type: "cancelled"}})
	e.wantFinished(cr2, store.StatusCancelled)

	// Without history, the cancellation ends it at once.
	cr = e.start(withRetry(&store.RunRetry{MaxAttempts: 3, InitialBackoff: store.Duration(time.Hour)}))
	e.failRun(cr, nil)
	if c := e.cancel(cr.Run.ID); c.Status != store.StatusCancelled && !(c.Status == store.StatusPending && c.CancelRequested) {
		t.Fatalf("cancelled during the backoff: %+v", c)
	}
}

// retryBadPolicy: a bad policy creates nothing and writes nothing.
func retryBadPolicy(t *testing.T, e *env) {
	for _, bad := range []*store.RunRetry{
		{MaxAttempts: 0},
		{MaxAttempts: store.MaxRetryAttempts + 1},
		{MaxAttempts: 2, InitialBackoff: -1},
		{MaxAttempts: 2, InitialBackoff: store.Duration(time.Hour), MaxBackoff: store.Duration(time.Minute)},
		{MaxAttempts: 2, Factor: 0.5},
		{MaxAttempts: 2, Jitter: 2},
		{MaxAttempts: 2, NonRetryableTypes: []string{""}},
	} {
		p := e.params(withRetry(bad))
		_, err := e.st.RunCreate(e.ctx, p)
		wantErr(t, fmt.Sprintf("RunCreate with retry %+v", *bad), err, store.ErrInvalidParams)
		if _, err := e.st.RunGet(e.ctx, &store.RunGetParams{Namespace: ns, Ref: p.ID}); err == nil {
			t.Fatalf("a run with a bad retry policy was created")
		}
		cr := e.start()
		err = e.checkpointErr(cr, store.CheckpointParams{Status: store.StatusFailed, Error: boom, Retry: bad})
		wantErr(t, fmt.Sprintf("Checkpoint with retry %+v", *bad), err, store.ErrInvalidParams)
		e.wantStatus(cr.Run.ID, store.StatusRunning)
		e.finish(cr)
	}
	cr := e.start()
	err := e.checkpointErr(cr, store.CheckpointParams{Status: store.StatusSucceeded, Retry: &store.RunRetry{MaxAttempts: 2}})
	wantErr(t, "Checkpoint succeeded with a retry policy", err, store.ErrInvalidParams)
}

// retryBatch: runs created in a batch keep their policies.
func retryBatch(t *testing.T, e *env) {
	policy := &store.RunRetry{MaxAttempts: 4, InitialBackoff: store.Duration(time.Second)}
	with, without := e.params(withRetry(policy)), e.params()
	res, err := e.st.RunsCreate(e.ctx, &store.RunsCreateParams{Namespace: ns, Runs: []*store.RunCreateParams{with, without}})
	if err != nil {
		t.Fatalf("RunsCreate: %v", err)
	}
	if r := res.Items[0].Run; r.Retry == nil || r.Retry.MaxAttempts != 4 || r.WorkflowAttempt != 1 {
		t.Fatalf("batch run with a policy = %+v", r)
	}
	if r := e.get(with.ID); r.Retry == nil || r.Retry.MaxAttempts != 4 {
		t.Fatalf("batch run read back: retry %+v", r.Retry)
	}
	if r := e.get(without.ID); r.Retry != nil || r.WorkflowAttempt != 1 {
		t.Fatalf("batch run without a policy read back: retry %+v, attempt %d", r.Retry, r.WorkflowAttempt)
	}
	// A create with an idempotency key (which a driver may merge with
	// others), and one created claimed, keep theirs too.
	keyed := e.params(withRetry(policy))
	keyed.Idempotency = idemRecord("retry-key", "a")
	if _, err := e.st.RunCreate(e.ctx, keyed); err != nil {
		t.Fatalf("RunCreate with a key: %v", err)
	}
	claimed := e.params(withRetry(policy))
	claimed.Claim = &store.CreateClaim{Worker: worker, LeaseDuration: leaseDur}
	res2, err := e.st.RunCreate(e.ctx, claimed)
	if err != nil {
		t.Fatalf("RunCreate claimed: %v", err)
	}
	if res2.Claimed == nil || res2.Claimed.Run.Retry == nil {
		t.Fatalf("created claimed: %+v", res2.Claimed)
	}
	for _, id := range []string{keyed.ID, claimed.ID} {
		if r := e.get(id); r.Retry == nil || r.Retry.MaxAttempts != 4 {
			t.Fatalf("run %s read back: retry %+v", id, r.Retry)
		}
	}
}
