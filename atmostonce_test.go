package trellis_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
)

// The at-most-once tests kill a worker process (SIGKILL) while an attempt of
// an at-most-once step is under way, then let another worker take the run
// over: the step must not run again, and its OnUnknown policy decides.

const (
	envAMOStore   = "TRELLIS_AMO_STORE"
	envAMOServer  = "TRELLIS_AMO_SERVER"
	envAMOToken   = "TRELLIS_AMO_TOKEN"
	envAMOEffects = "TRELLIS_AMO_EFFECTS"
	// envAMOHang makes the step block after recording its effect: the worker
	// process that has it is killed in the middle of the attempt.
	envAMOHang = "TRELLIS_AMO_HANG"
)

// amoIn is the input of the at-most-once workflow: the step's policy.
type amoIn struct {
	Policy trellis.OnUnknown
	Async  bool // the step is an Async one, awaited with Get
	// ApprovalTimeout is the timeout of the approval UnknownAskApproval asks for.
	ApprovalTimeout time.Duration
}

// amoWorkflow has one at-most-once step, "charge", which appends
// "<run> <idempotency key> <attempt>" to the effects file (its side effect),
// then, in a process with envAMOHang, blocks until the process is killed. It
// returns "unknown" when the step's outcome is unknown (ErrStepOutcomeUnknown),
// else "charged:" and the step's result.
func amoWorkflow(effects string) *trellis.Workflow[amoIn, string] {
	return trellis.NewWorkflow("amo", func(wc *trellis.Context, in amoIn) (string, error) {
		charge := func(ctx context.Context) (string, error) {
			info := trellis.StepInfo(ctx)
			if err := appendLine(effects, fmt.Sprintf("%s %s %d\n", info.RunID, info.IdempotencyKey, info.Attempt)); err != nil {
				return "", err
			}
			if os.Getenv(envAMOHang) != "" {
				time.Sleep(time.Hour) // until SIGKILL
			}
			return "receipt", nil
		}
		opts := trellis.StepOptions{AtMostOnce: true, OnUnknown: in.Policy,
			UnknownApproval: trellis.ApprovalOptions{Approvers: []string{"ops"}, Timeout: in.ApprovalTimeout}}
		var r string
		var err error
		if in.Async {
			r, err = trellis.Async(wc, "charge", charge, opts).Get(wc)
		} else {
			r, err = trellis.Step(wc, "charge", charge, opts)
		}
		if errors.Is(err, trellis.ErrStepOutcomeUnknown) {
			return "unknown", nil
		}
		if err != nil {
			return "", err
		}
		return "charged:" + r, nil
	})
}

// amoEffects reads the effects file: the lines of each run.
func amoEffects(t *testing.T, path string) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	m := map[string][]string{}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) != 3 {
			t.Fatalf("effects: bad line %q", line)
		}
		m[f[0]] = append(m[f[0]], f[1]+" "+f[2])
	}
	return m
}

// TestAtMostOnceWorkerProcess is the embedded worker process of
// TestAtMostOnceCrash; it runs until killed.
func TestAtMostOnceWorkerProcess(t *testing.T) {
	url := os.Getenv(envAMOStore)
	if url == "" {
		t.Skip("runs only as the worker process of TestAtMostOnceCrash")
	}
	cfg := trellis.Config{Store: url}
	cfg.Worker.LeaseDuration = time.Second
	cfg.Worker.PollInterval = 50 * time.Millisecond
	workUntilKilled(t, cfg, amoWorkflow(os.Getenv(envAMOEffects)))
}

// TestAtMostOnceRemoteWorkerProcess is the remote worker process of
// TestAtMostOnceCrashRemote; it runs until killed.
func TestAtMostOnceRemoteWorkerProcess(t *testing.T) {
	base := os.Getenv(envAMOServer)
	if base == "" {
		t.Skip("runs only as the worker process of TestAtMostOnceCrashRemote")
	}
	cfg := trellis.Config{Server: base, Token: os.Getenv(envAMOToken)}
	cfg.Worker.LeaseDuration = time.Second
	w, err := trellis.NewWorker(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(context.Background(), amoWorkflow(os.Getenv(envAMOEffects))); err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// An at-most-once step whose embedded worker process is killed mid-attempt is
// not run again by the worker that takes the run over; each policy does what
// it says. On SQLite and Postgres.
func TestAtMostOnceCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	for name, url := range remoteStores() {
		t.Run(name, func(t *testing.T) {
			url := url(t)
			effects := filepath.Join(t.TempDir(), "effects.log")
			client := open(t, url, func(c *trellis.Config) { c.Worker.Disabled = true })
			hang := func() *testProcess {
				return startTestProcess(t, "TestAtMostOnceWorkerProcess", envAMOStore+"="+url,
					envAMOEffects+"="+effects, envAMOHang+"=1")
			}
			takeover := func() {
				c := open(t, url)
				register(t, c, amoWorkflow(effects))
			}
			atMostOnceCrash(t, client, effects, hang, takeover, false)
		})
	}
}

// The same through a server: a remote Go worker process is killed
// mid-attempt and another remote worker takes the runs over.
func TestAtMostOnceCrashRemote(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	for name, url := range remoteStores() {
		t.Run(name, func(t *testing.T) {
			effects := filepath.Join(t.TempDir(), "effects.log")
			s := newWorkerServer(t, url(t))
			wtok := s.token(t, "w", auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
			client := open(t, "", func(c *trellis.Config) { c.Store, c.Backend, c.Worker.Disabled = "", s.st, true })
			hang := func() *testProcess {
				return startTestProcess(t, "TestAtMostOnceRemoteWorkerProcess", envAMOServer+"="+s.base,
					envAMOToken+"="+wtok, envAMOEffects+"="+effects, envAMOHang+"=1")
			}
			takeover := func() { startRemoteWorker(t, s.base, wtok, amoWorkflow(effects)) }
			atMostOnceCrash(t, client, effects, hang, takeover, true)
		})
	}
}

// atMostOnceCrash starts a run per policy (three with an approval, decided
// three ways), lets the process hang start them all begin their step
// attempt, kills it, lets takeover's worker finish them and checks what each
// run saw and did.
//
// With heartbeats, the kill waits until the worker's lease heartbeats have
// reported the attempts running, so that the claim that takes the runs over
// records them lost (what the history then shows, and an unknown outcome as
// much as a started row); without, it kills at once, and the attempts' rows
// are most likely still started.
func atMostOnceCrash(t *testing.T, client *trellis.Client, effects string, hang func() *testProcess, takeover func(), heartbeats bool) {
	ctx := ctxT(t)
	wf := amoWorkflow(effects)
	starts := map[string]amoIn{
		"return-error":  {Policy: trellis.UnknownReturnError},
		"fail-run":      {Policy: trellis.UnknownFailRun},
		"approve":       {Policy: trellis.UnknownAskApproval},
		"reject-done":   {Policy: trellis.UnknownAskApproval},
		"reject":        {Policy: trellis.UnknownAskApproval},
		"async-error":   {Policy: trellis.UnknownReturnError, Async: true},
		"async-fail":    {Policy: trellis.UnknownFailRun, Async: true},
		"async-approve": {Policy: trellis.UnknownAskApproval, Async: true},
		// nobody decides: the request expires, and the step returns its error
		"approval-expires": {Policy: trellis.UnknownAskApproval, ApprovalTimeout: 300 * time.Millisecond},
	}
	h := map[string]*trellis.Handle[string]{}
	for id, in := range starts {
		h[id] = must[*trellis.Handle[string]](t)(trellis.Start(ctx, client, wf, in, trellis.StartOptions{ID: id}))
	}
	p := hang()
	defer p.kill(t)
	waitEffects(t, effects, len(starts))
	if heartbeats {
		time.Sleep(900 * time.Millisecond) // a heartbeat every third of the 1 s lease
	}
	p.kill(t) // every run is in its step's first attempt

	takeover()
	approvals := map[string]string{} // run ID → the approval request's ID
	for id := range starts {
		if starts[id].Policy != trellis.UnknownAskApproval || starts[id].ApprovalTimeout > 0 {
			continue
		}
		run := waitStatus(t, client, h[id].RunID(), trellis.StatusWaiting)
		if !strings.Contains(run.WaitReason, `"charge: outcome unknown"`) {
			t.Errorf("%s: wait reason %q, want the approval of the unknown outcome", id, run.WaitReason)
		}
		approvals[id] = h[id].RunID() + ".approval.1"
	}
	must[*trellis.ApprovalRecord](t)(client.Approve(ctx, approvals["approve"], "ops", "not charged: run it again"))
	must[*trellis.ApprovalRecord](t)(client.Approve(ctx, approvals["async-approve"], "ops", ""))
	must[*trellis.ApprovalRecord](t)(client.Reject(ctx, approvals["reject-done"], "ops", "Done: the PSP shows the charge"))
	must[*trellis.ApprovalRecord](t)(client.Reject(ctx, approvals["reject"], "ops", "cannot tell"))

	want := map[string]string{"return-error": "unknown", "approve": "charged:receipt", "reject-done": "charged:", "reject": "unknown",
		"async-error": "unknown", "async-approve": "charged:receipt", "approval-expires": "unknown"}
	for id, out := range want {
		if got := mustResult(t, h[id]); got != out {
			t.Errorf("%s: result %q, want %q", id, got, out)
		}
	}
	for _, id := range []string{"fail-run", "async-fail"} {
		_, err := h[id].Result(ctx)
		var re *trellis.RunError
		if !errors.As(err, &re) || re.Status != trellis.StatusFailed || !errors.Is(err, trellis.ErrStepOutcomeUnknown) {
			t.Errorf("%s: result error %v, want a failed run's ErrStepOutcomeUnknown", id, err)
		}
		if n := len(amoEffects(t, effects)[h[id].RunID()]); n != 1 {
			t.Errorf("%s: the step ran %d times, want 1", id, n)
		}
	}

	// One effect per run (its first attempt), and a second for the approved
	// run, with the first one's idempotency key.
	got := amoEffects(t, effects)
	for id := range want {
		run := h[id].RunID()
		n := 1
		if strings.HasSuffix(id, "approve") {
			n = 2
		}
		if len(got[run]) != n {
			t.Errorf("%s: the step ran %d time(s), want %d: %q", id, len(got[run]), n, got[run])
			continue
		}
		for _, e := range got[run] {
			if key := strings.Fields(e)[0]; key != run+"/0" {
				t.Errorf("%s: effect with idempotency key %q, want %s/0", id, key, run)
			}
		}
	}

	// The history: the step is done with the unknown outcome's error after
	// one attempt, whose row says it started (or was lost).
	for id := range starts {
		ops := must[[]*trellis.Op](t)(client.History(ctx, h[id].RunID()))
		op := ops[0]
		if op.Name != "charge" || !op.Done || op.Error == nil || op.Error.Type != "step_outcome_unknown" || op.Attempts != 1 {
			t.Errorf("%s: op 0 is %+v, want the step done with a step_outcome_unknown error after 1 attempt", id, op)
			continue
		}
		// Started, or lost when a heartbeat had reported the attempt before the
		// kill (the claim that took the run over records it so).
		if len(op.AttemptLog) != 1 || op.AttemptLog[0].Attempt != 1 || heartbeats && op.AttemptLog[0].Outcome != trellis.AttemptLost ||
			(op.AttemptLog[0].Outcome != trellis.AttemptStarted && op.AttemptLog[0].Outcome != trellis.AttemptLost) {
			t.Errorf("%s: attempt log %+v, want the unknown attempt 1, started or lost (lost after heartbeats: %v)", id, op.AttemptLog, heartbeats)
		} else {
			t.Logf("%s: attempt 1 %s", id, op.AttemptLog[0].Outcome)
		}
		if strings.HasSuffix(id, "approve") && (len(ops) < 3 || ops[1].Kind != trellis.OpApproval || ops[2].Name != "charge" || !ops[2].Done || ops[2].Error != nil) {
			t.Errorf("approve: history %+v, want the approval then the step run again", ops)
		}
		if id == "approval-expires" && (len(ops) != 2 || ops[1].Kind != trellis.OpApproval || ops[1].Error == nil || ops[1].Error.Type != "approval_timeout") {
			t.Errorf("approval-expires: history %+v, want the expired approval", ops)
		}
	}
}

// waitEffects waits until the effects file has n lines.
func waitEffects(t *testing.T, path string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		total := 0
		for _, l := range amoEffects(t, path) {
			total += len(l)
		}
		if total >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d effects, want %d", total, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A failure an attempt reports is known: an at-most-once step retries it by
// its policy. Each attempt's start row is replaced by its final record: the
// history shows the failed attempt, then the one that succeeded (its
// attempt_started_at), and no started row.
func TestAtMostOnceRetriesReportedFailures(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	wf := trellis.NewWorkflow("amo-retry", func(wc *trellis.Context, fail int) (string, error) {
		first, err := trellis.Step(wc, "once", func(ctx context.Context) (string, error) { return "a", nil },
			trellis.StepOptions{AtMostOnce: true})
		if err != nil {
			return "", err
		}
		second, err := trellis.Step(wc, "flaky", func(ctx context.Context) (string, error) {
			if int(runs.Add(1)) <= fail {
				return "", errBoom
			}
			return "b", nil
		}, trellis.StepOptions{AtMostOnce: true, OnUnknown: trellis.UnknownFailRun,
			Retry: trellis.RetryPolicy{MaxAttempts: 3, Backoff: trellis.Fixed(time.Millisecond)}})
		return first + second, err
	})
	c := setup(t, wf)
	ctx := ctxT(t)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctx, c, wf, 1))
	if got := mustResult(t, h); got != "ab" {
		t.Fatalf("result %q", got)
	}
	if n := runs.Load(); n != 2 {
		t.Errorf("the flaky step ran %d times, want 2 (a reported failure is retried)", n)
	}
	ops := must[[]*trellis.Op](t)(c.History(ctx, h.RunID()))
	if len(ops) != 2 {
		t.Fatalf("history %+v", ops)
	}
	if op := ops[0]; op.Attempts != 1 || len(op.AttemptLog) != 0 || op.AttemptStartedAt == nil || op.Error != nil {
		t.Errorf("step once: %+v, want 1 attempt with its start and no attempt log", op)
	}
	if op := ops[1]; op.Attempts != 2 || len(op.AttemptLog) != 1 || op.AttemptLog[0].Error.Message != errBoom.Error() || op.AttemptStartedAt == nil {
		t.Errorf("step flaky: %+v, want the failed attempt 1 in its log and attempt 2's start", op)
	}
}

// OnUnknown without AtMostOnce, or a policy that does not exist, is refused:
// the step returns ErrInvalidParams and records nothing.
func TestAtMostOnceBadOptions(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	wf := trellis.NewWorkflow("amo-bad", func(wc *trellis.Context, i int) (string, error) {
		opts := []trellis.StepOptions{
			{OnUnknown: trellis.UnknownFailRun},
			{AtMostOnce: true, OnUnknown: trellis.OnUnknown(7)},
		}[i]
		var err error
		if i == 0 {
			_, err = trellis.Step(wc, "s", func(context.Context) (int, error) { ran.Add(1); return 1, nil }, opts)
		} else {
			_, err = trellis.Async(wc, "s", func(context.Context) (int, error) { ran.Add(1); return 1, nil }, opts).Get(wc)
		}
		if !errors.Is(err, trellis.ErrInvalidParams) {
			return "", fmt.Errorf("got %v, want ErrInvalidParams", err)
		}
		return err.Error(), nil
	})
	c := setup(t, wf)
	ctx := ctxT(t)
	for i, want := range []string{"applies to at-most-once steps only", "not one of UnknownReturnError"} {
		h := must[*trellis.Handle[string]](t)(trellis.Start(ctx, c, wf, i))
		if got := mustResult(t, h); !strings.Contains(got, want) {
			t.Errorf("case %d: %q, want it to say %q", i, got, want)
		}
		if ops := must[[]*trellis.Op](t)(c.History(ctx, h.RunID())); len(ops) != 0 {
			t.Errorf("case %d: history %+v, want nothing recorded", i, ops)
		}
	}
	if ran.Load() != 0 {
		t.Error("a step with bad options ran")
	}
}

// A worker that stops (Close) while an at-most-once attempt still runs past
// its ShutdownGrace cancels it and hands the run back: the attempt may have
// taken effect, so the next worker does not run it again either.
func TestAtMostOnceShutdownPastGrace(t *testing.T) {
	t.Parallel()
	var runs atomic.Int32
	started := make(chan struct{}, 1)
	wf := trellis.NewWorkflow("amo-shutdown", func(wc *trellis.Context, _ int) (string, error) {
		_, err := trellis.Step(wc, "send", func(ctx context.Context) (string, error) {
			if runs.Add(1) == 1 {
				started <- struct{}{}
				<-ctx.Done() // past the grace: cancelled by the worker's stop
				return "", ctx.Err()
			}
			return "sent", nil
		}, trellis.StepOptions{AtMostOnce: true})
		if errors.Is(err, trellis.ErrStepOutcomeUnknown) {
			return "unknown", nil
		}
		return "sent", err
	})
	url := storeURL(t)
	cfg := trellis.Config{Store: url}
	cfg.Worker.ShutdownGrace = 100 * time.Millisecond
	c1, err := trellis.Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	register(t, c1, wf)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c1, wf, 0))
	<-started
	if err := c1.Close(); err != nil {
		t.Fatal(err)
	}
	c2 := open(t, url)
	register(t, c2, wf)
	h2 := must[*trellis.Handle[string]](t)(trellis.GetHandle(ctxT(t), c2, wf, h.ID()))
	if got := mustResult(t, h2); got != "unknown" {
		t.Errorf("result %q, want the unknown outcome", got)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("the step ran %d times, want 1", n)
	}
}
