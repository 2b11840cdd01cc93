package trellis_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
)

// retryCounters count the executions of the steps of retryWorkflow.
type retryCounters struct {
	lookups, charges atomic.Int64
	// failCharges: the charge step fails until it has been called this often.
	failCharges int64
}

// retryWorkflow looks an order up (a step that succeeds) and charges it (a
// step with 2 attempts that fails its first failCharges calls), and reports
// the run attempt that ended it.
func retryWorkflow(name string, n *retryCounters, opts trellis.WorkflowOptions) *trellis.Workflow[string, string] {
	return trellis.NewWorkflow(name, func(wc *trellis.Context, order string) (string, error) {
		if _, err := trellis.Step(wc, "lookup", func(ctx context.Context) (string, error) {
			n.lookups.Add(1)
			return "found " + order, nil
		}); err != nil {
			return "", err
		}
		_, err := trellis.Step(wc, "charge", func(ctx context.Context) (int, error) {
			if c := n.charges.Add(1); c <= n.failCharges {
				return 0, fmt.Errorf("card service down (call %d)", c)
			}
			return 42, nil
		}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Fixed(time.Millisecond)}})
		if err != nil {
			return "", fmt.Errorf("charging: %w", err)
		}
		return fmt.Sprintf("charged on run attempt %d", wc.WorkflowAttempt()), nil
	}, opts)
}

// TestWorkflowRetry: a run whose function fails is attempted again after its
// backoff: the succeeded step replays, the failed one runs again with a fresh
// budget of attempts numbered on, and every failed run attempt is recorded.
func TestWorkflowRetry(t *testing.T) {
	n := &retryCounters{failCharges: 4} // attempts 1-2 fail run attempt 1, 3-4 run attempt 2
	wf := retryWorkflow("wfretry", n, trellis.WorkflowOptions{
		Retry: &trellis.RetryPolicy{MaxAttempts: 3, Backoff: trellis.Fixed(50 * time.Millisecond)}})
	c := setup(t, wf)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, "order-1"))
	if out := mustResult(t, h); out != "charged on run attempt 3" {
		t.Fatalf("result = %q", out)
	}
	if l, ch := n.lookups.Load(), n.charges.Load(); l != 1 || ch != 5 {
		t.Fatalf("lookup ran %d times (want 1: replayed), charge %d (want 5)", l, ch)
	}
	run := must[*trellis.Run](t)(c.Get(ctxT(t), h.RunID()))
	if run.Status != trellis.StatusSucceeded || run.WorkflowAttempt != 3 || len(run.WorkflowAttempts) != 2 {
		t.Fatalf("run: status %s, workflow attempt %d, attempts %+v", run.Status, run.WorkflowAttempt, run.WorkflowAttempts)
	}
	for i, a := range run.WorkflowAttempts {
		if a.Attempt != i+1 || !strings.Contains(a.Error.Message, "card service down") ||
			len(a.Steps) != 1 || a.Steps[0].Name != "charge" || a.Steps[0].Attempts != 2*(i+1) {
			t.Fatalf("run attempt %d = %+v", i+1, a)
		}
		if a.RetryAt.Sub(a.FailedAt) < 50*time.Millisecond || a.FailedAt.Before(a.StartedAt) {
			t.Fatalf("run attempt %d times: started %v, failed %v, retry %v", i+1, a.StartedAt, a.FailedAt, a.RetryAt)
		}
	}
	ops := must[[]*trellis.Op](t)(c.History(ctxT(t), h.RunID()))
	if len(ops) != 2 || ops[0].Attempts != 1 {
		t.Fatalf("history = %+v", ops)
	}
	charge := ops[1]
	if !charge.Done || charge.Error != nil || charge.Attempts != 5 || len(charge.AttemptLog) != 4 {
		t.Fatalf("charge op = %+v, want done at attempt 5 after 4 failed attempts", charge)
	}
	for i, a := range charge.AttemptLog {
		if a.Attempt != i+1 {
			t.Fatalf("charge attempt log %+v: numbered on across run attempts", charge.AttemptLog)
		}
	}
	// The stream tells of each retry as a wait, and ends succeeded.
	var names []string
	for ev, err := range c.Stream(ctxT(t), h.RunID(), 0) {
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, ev.Name)
		if ev.Name == "run.waiting" && strings.Contains(string(ev.Data), `"retry"`) {
			var data struct {
				Reason string
				Retry  struct {
					Attempt int
					Error   trellis.ErrorInfo
				}
			}
			if err := json.Unmarshal(ev.Data, &data); err != nil || data.Retry.Attempt < 1 ||
				!strings.Contains(data.Reason, "workflow retry") || data.Retry.Error.Message == "" {
				t.Fatalf("retry event %s (%v)", ev.Data, err)
			}
		}
	}
	got := strings.Join(names, " ")
	if strings.Count(got, "run.waiting") != 2 || strings.Contains(got, "run.failed") || !strings.HasSuffix(got, "run.succeeded") {
		t.Fatalf("stream = %s", got)
	}
}

// TestWorkflowRetryExhausted: the last attempt's failure fails the run, with
// every attempt recorded; a non-retryable error fails it at once; without a
// policy a run fails on its first failure.
func TestWorkflowRetryExhausted(t *testing.T) {
	n := &retryCounters{failCharges: 1000}
	wf := retryWorkflow("wfretry-exhausted", n, trellis.WorkflowOptions{
		Retry: &trellis.RetryPolicy{MaxAttempts: 3, Backoff: trellis.Exponential(10*time.Millisecond, 2, time.Second)}})
	plain := retryWorkflow("wfretry-none", &retryCounters{failCharges: 1000}, trellis.WorkflowOptions{})
	var calls atomic.Int64
	declined := trellis.NewWorkflow("wfretry-declined", func(wc *trellis.Context, _ string) (string, error) {
		calls.Add(1)
		return "", trellis.NonRetryable(errors.New("card declined"))
	}, trellis.WorkflowOptions{Retry: &trellis.RetryPolicy{MaxAttempts: 5, Backoff: trellis.Fixed(time.Millisecond)}})
	c := setup(t, wf, plain, declined)

	h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, "order-2"))
	_, err := h.Result(ctxT(t))
	var re *trellis.RunError
	if !errors.As(err, &re) || re.Status != trellis.StatusFailed || !strings.Contains(re.Message, "card service down") {
		t.Fatalf("result error = %v, want the run failed", err)
	}
	if ch := n.charges.Load(); ch != 6 {
		t.Fatalf("charge ran %d times, want 6 (2 per run attempt)", ch)
	}
	run := must[*trellis.Run](t)(c.Get(ctxT(t), h.RunID()))
	if run.WorkflowAttempt != 3 || len(run.WorkflowAttempts) != 2 || run.Error == nil {
		t.Fatalf("failed run: attempt %d, attempts %+v, error %+v", run.WorkflowAttempt, run.WorkflowAttempts, run.Error)
	}
	ops := must[[]*trellis.Op](t)(c.History(ctxT(t), h.RunID()))
	if ops[1].Attempts != 6 || len(ops[1].AttemptLog) != 6 || !ops[1].Done || ops[1].Error == nil {
		t.Fatalf("charge op = %+v, want 6 failed attempts", ops[1])
	}

	hd := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, declined, "x"))
	if _, err := hd.Result(ctxT(t)); err == nil || calls.Load() != 1 {
		t.Fatalf("non-retryable failure: err %v, %d calls (want 1)", err, calls.Load())
	}
	hp := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, plain, "x"))
	if _, err := hp.Result(ctxT(t)); err == nil {
		t.Fatal("a workflow without a retry policy succeeded")
	}
	if r := must[*trellis.Run](t)(c.Get(ctxT(t), hp.RunID())); r.WorkflowAttempt != 1 || r.WorkflowAttempts != nil {
		t.Fatalf("run without retries: attempt %d, %+v", r.WorkflowAttempt, r.WorkflowAttempts)
	}
}

// TestWorkflowRetryStartOptions: StartOptions.Retry, stored with the run,
// replaces the workflow's policy for that run.
func TestWorkflowRetryStartOptions(t *testing.T) {
	n := &retryCounters{failCharges: 2}
	plain := retryWorkflow("wfretry-start", n, trellis.WorkflowOptions{})
	m := &retryCounters{failCharges: 2}
	withPolicy := retryWorkflow("wfretry-start-off", m, trellis.WorkflowOptions{
		Retry: &trellis.RetryPolicy{MaxAttempts: 5, Backoff: trellis.Fixed(time.Millisecond)}})
	c := setup(t, plain, withPolicy)

	policy := &trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Fixed(20 * time.Millisecond)}
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, plain, "o", trellis.StartOptions{Retry: policy}))
	if out := mustResult(t, h); out != "charged on run attempt 2" {
		t.Fatalf("result = %q", out)
	}
	run := must[*trellis.Run](t)(c.Get(ctxT(t), h.RunID()))
	if run.Retry == nil || run.Retry.MaxAttempts != 2 || time.Duration(run.Retry.InitialBackoff) != 20*time.Millisecond {
		t.Fatalf("stored policy = %+v", run.Retry)
	}
	// MaxAttempts 1 turns the workflow's retries off for one run.
	h = must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, withPolicy, "o",
		trellis.StartOptions{Retry: &trellis.RetryPolicy{MaxAttempts: 1}}))
	if _, err := h.Result(ctxT(t)); err == nil {
		t.Fatal("retried although the start said MaxAttempts 1")
	}

	// A policy the store cannot apply starts nothing.
	before := must[*trellis.RunPage](t)(c.List(ctxT(t), trellis.ListOptions{}))
	for _, bad := range []*trellis.RetryPolicy{
		{MaxAttempts: 3, Backoff: customBackoff{}},
		{MaxAttempts: 3, Backoff: trellis.Fixed(0)},
		{MaxAttempts: 5000},
	} {
		_, err := trellis.Start(ctxT(t), c, plain, "o", trellis.StartOptions{Retry: bad})
		if !errors.Is(err, trellis.ErrInvalidParams) || !strings.Contains(err.Error(), "Retry") {
			t.Fatalf("start with retry %+v: %v, want ErrInvalidParams", bad, err)
		}
	}
	if after := must[*trellis.RunPage](t)(c.List(ctxT(t), trellis.ListOptions{})); len(after.Runs) != len(before.Runs) {
		t.Fatalf("a refused start created a run: %d runs, want %d", len(after.Runs), len(before.Runs))
	}
	bad := trellis.NewWorkflow("wfretry-bad", func(wc *trellis.Context, _ string) (string, error) { return "", nil },
		trellis.WorkflowOptions{Retry: &trellis.RetryPolicy{Backoff: customBackoff{}}})
	if err := c.Register(ctxT(t), bad); !errors.Is(err, trellis.ErrInvalidParams) {
		t.Fatalf("Register with a custom backoff: %v, want ErrInvalidParams", err)
	}
}

type customBackoff struct{}

func (customBackoff) Delay(int) time.Duration { return time.Second }

// TestWorkflowRetryCancelDuringBackoff: a run waiting for its next attempt is
// cancelled by Cancel and ends cancelled, its step not run again.
func TestWorkflowRetryCancelDuringBackoff(t *testing.T) {
	n := &retryCounters{failCharges: 1000}
	wf := retryWorkflow("wfretry-cancel", n, trellis.WorkflowOptions{
		Retry: &trellis.RetryPolicy{MaxAttempts: 3, Backoff: trellis.Fixed(time.Hour)}})
	c := setup(t, wf)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, "o"))
	w := waitStatus(t, c, h.RunID(), trellis.StatusWaiting)
	if w.WorkflowAttempt != 2 || !strings.Contains(w.WaitReason, "workflow retry: attempt 1 failed") {
		t.Fatalf("waiting run: attempt %d, reason %q", w.WorkflowAttempt, w.WaitReason)
	}
	if err := c.Cancel(ctxT(t), h.RunID()); err != nil {
		t.Fatal(err)
	}
	r := waitStatus(t, c, h.RunID(), trellis.StatusCancelled)
	if ch := n.charges.Load(); ch != 2 {
		t.Fatalf("charge ran %d times, want 2 (none after the cancellation)", ch)
	}
	if r.Error == nil || r.Error.Type != "cancelled" {
		t.Fatalf("cancelled run error = %+v", r.Error)
	}
}

// TestWorkflowRetryRemoteWorker: a remote Go worker's workflow retries
// through a server, on SQLite and Postgres: the workflow's policy travels
// with the failing checkpoint, a start's policy through the API; the
// server's protocol check accepts the next attempt's writes of the reset
// steps; a run waiting for its retry is cancelled through the API.
func TestWorkflowRetryRemoteWorker(t *testing.T) {
	for name, url := range remoteStores() {
		t.Run(name, func(t *testing.T) {
			s := newWorkerServer(t, url(t))
			wtok := s.token(t, "w", auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
			ptok := s.token(t, "p", auth.Grant{Role: auth.RoleProducer, Namespace: "default"}, auth.Grant{Role: auth.RoleReader, Namespace: "default"})
			n := &retryCounters{failCharges: 4}
			wf := retryWorkflow("wfretry-remote", n, trellis.WorkflowOptions{
				Retry: &trellis.RetryPolicy{MaxAttempts: 3, Backoff: trellis.Fixed(50 * time.Millisecond)}})
			m := &retryCounters{failCharges: 2}
			plain := retryWorkflow("wfretry-remote-plain", m, trellis.WorkflowOptions{})
			k := &retryCounters{failCharges: 1000}
			slow := retryWorkflow("wfretry-remote-slow", k, trellis.WorkflowOptions{
				Retry: &trellis.RetryPolicy{MaxAttempts: 3, Backoff: trellis.Fixed(time.Hour)}})
			startRemoteWorker(t, s.base, wtok, wf, plain, slow)
			c, err := trellis.Open(context.Background(), trellis.Config{Server: s.base, Token: ptok})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()

			h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, "o"))
			if out := mustResult(t, h); out != "charged on run attempt 3" {
				t.Fatalf("result = %q", out)
			}
			if l, ch := n.lookups.Load(), n.charges.Load(); l != 1 || ch != 5 {
				t.Fatalf("lookup ran %d times, charge %d; want 1 and 5", l, ch)
			}
			run := must[*trellis.Run](t)(c.Get(ctxT(t), h.RunID()))
			if run.WorkflowAttempt != 3 || len(run.WorkflowAttempts) != 2 || run.WorkflowAttempts[1].Steps[0].Attempts != 4 {
				t.Fatalf("run: attempt %d, attempts %+v", run.WorkflowAttempt, run.WorkflowAttempts)
			}
			ops := must[[]*trellis.Op](t)(c.History(ctxT(t), h.RunID()))
			if ops[1].Attempts != 5 || len(ops[1].AttemptLog) != 4 || !ops[1].Done || ops[1].Error != nil {
				t.Fatalf("charge op = %+v", ops[1])
			}

			// A start's policy, through the API.
			hp := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, plain, "o", trellis.StartOptions{
				Retry: &trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Exponential(20*time.Millisecond, 2, time.Second)}}))
			if out := mustResult(t, hp); out != "charged on run attempt 2" {
				t.Fatalf("result with the start's policy = %q", out)
			}
			if r := must[*trellis.Run](t)(c.Get(ctxT(t), hp.RunID())); r.Retry == nil || r.Retry.MaxAttempts != 2 {
				t.Fatalf("stored policy = %+v", r.Retry)
			}

			// Cancelled while it waits for its retry.
			hs := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, slow, "o"))
			w := waitStatus(t, c, hs.RunID(), trellis.StatusWaiting)
			if !strings.Contains(w.WaitReason, "workflow retry") {
				t.Fatalf("wait reason %q", w.WaitReason)
			}
			if err := c.Cancel(ctxT(t), hs.RunID()); err != nil {
				t.Fatal(err)
			}
			waitStatus(t, c, hs.RunID(), trellis.StatusCancelled)
			if k.charges.Load() != 2 {
				t.Fatalf("charge ran %d times, want 2", k.charges.Load())
			}
		})
	}
}

// TestWorkflowRetryJob: a job started with a workflow retry policy is
// retried as a workflow when its attempts are spent: its step runs again with
// a fresh budget, its attempts numbered on.
func TestWorkflowRetryJob(t *testing.T) {
	var calls atomic.Int64
	j := trellis.NewJob("wfretry-job", func(ctx context.Context, n int) (int, error) {
		if calls.Add(1) <= 3 {
			return 0, errors.New("upstream down")
		}
		return n * 2, nil
	}, trellis.JobOptions{Retry: trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Fixed(time.Millisecond)}})
	c := setup(t, j)
	h := must[*trellis.Handle[int]](t)(trellis.StartJob(ctxT(t), c, j, 21,
		trellis.StartOptions{Retry: &trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Fixed(20 * time.Millisecond)}}))
	if out := mustResult(t, h); out != 42 {
		t.Fatalf("result = %d", out)
	}
	run := must[*trellis.Run](t)(c.Get(ctxT(t), h.RunID()))
	if run.WorkflowAttempt != 2 || len(run.WorkflowAttempts) != 1 || run.WorkflowAttempts[0].Steps[0].Attempts != 2 {
		t.Fatalf("job run: attempt %d, %+v", run.WorkflowAttempt, run.WorkflowAttempts)
	}
	ops := must[[]*trellis.Op](t)(c.History(ctxT(t), h.RunID()))
	if len(ops) != 1 || ops[0].Attempts != 4 || len(ops[0].AttemptLog) != 3 {
		t.Fatalf("job op = %+v, want attempt 4 after 3 failed", ops[0])
	}
	// Without a start's policy a job fails when its own attempts are spent.
	calls.Store(0)
	h = must[*trellis.Handle[int]](t)(trellis.StartJob(ctxT(t), c, j, 21))
	if _, err := h.Result(ctxT(t)); err == nil {
		t.Fatal("a job without a workflow retry policy succeeded")
	}
}

// TestWorkflowRetryChild: a child run retried by its workflow's policy ends
// once, succeeded, and its parent gets its output; a reset run keeps the
// retry policy its source was started with.
func TestWorkflowRetryChild(t *testing.T) {
	n := &retryCounters{failCharges: 2}
	child := retryWorkflow("wfretry-child", n, trellis.WorkflowOptions{
		Retry: &trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Fixed(20 * time.Millisecond)}})
	parent := trellis.NewWorkflow("wfretry-parent", func(wc *trellis.Context, order string) (string, error) {
		return trellis.Child(wc, child, order)
	})
	plain := retryWorkflow("wfretry-reset", &retryCounters{failCharges: 1000}, trellis.WorkflowOptions{})
	c := setup(t, child, parent, plain)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, parent, "o"))
	if out := mustResult(t, h); out != "charged on run attempt 2" {
		t.Fatalf("parent's result = %q", out)
	}

	policy := &trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Fixed(10 * time.Millisecond)}
	hp := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, plain, "o", trellis.StartOptions{Retry: policy}))
	if _, err := hp.Result(ctxT(t)); err == nil {
		t.Fatal("always-failing run succeeded")
	}
	reset := must[*trellis.Run](t)(c.Reset(ctxT(t), hp.RunID(), ""))
	if reset.Retry == nil || reset.Retry.MaxAttempts != 2 || reset.WorkflowAttempt != 1 {
		t.Fatalf("reset run: retry %+v, attempt %d", reset.Retry, reset.WorkflowAttempt)
	}
	done := must[*trellis.Run](t)(c.Wait(ctxT(t), reset.ID))
	if done.Status != trellis.StatusFailed || done.WorkflowAttempt != 2 {
		t.Fatalf("reset run ended %s at attempt %d, want failed at 2", done.Status, done.WorkflowAttempt)
	}
}
