package trellis_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// Environment of TestLostAttemptWorkerProcess.
const (
	envLostStore = "TRELLIS_LOST_STORE"
	envLostLog   = "TRELLIS_LOST_LOG"
)

// lostWorkflow runs step "flaky", which fails its first attempt with a backoff
// long enough to suspend the run (its second attempt comes after a replay),
// then step "charge", which hangs in the worker process (killed while it
// runs) and returns at once in the test's own worker. Each attempt appends
// "step attempt key" to the log file first.
func lostWorkflow(log string) *trellis.Workflow[int, string] {
	record := func(ctx context.Context) trellis.StepAttempt {
		info := trellis.StepInfo(ctx)
		if err := appendLine(log, fmt.Sprintf("%s %d %s\n", info.Step, info.Attempt, info.IdempotencyKey)); err != nil {
			panic(err)
		}
		return info
	}
	return trellis.NewWorkflow("lost-attempt", func(wc *trellis.Context, n int) (string, error) {
		if _, err := trellis.Step(wc, "flaky", func(ctx context.Context) (int, error) {
			if record(ctx).Attempt == 1 {
				return 0, errors.New("first attempt fails")
			}
			return n, nil
		}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 3, Backoff: trellis.Exponential(100*time.Millisecond, 2, 100*time.Millisecond)}}); err != nil {
			return "", err
		}
		return trellis.Step(wc, "charge", func(ctx context.Context) (string, error) {
			info := record(ctx)
			if os.Getenv(envLostStore) != "" {
				<-ctx.Done() // until SIGKILL
			}
			return fmt.Sprintf("charged at attempt %d", info.Attempt), nil
		}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 3, Backoff: trellis.Exponential(time.Millisecond, 2, time.Millisecond)}})
	})
}

// TestLostAttemptWorkerProcess is the worker process of TestLostAttemptIsRecorded.
func TestLostAttemptWorkerProcess(t *testing.T) {
	url := os.Getenv(envLostStore)
	if url == "" {
		t.Skip("runs only as the worker process of TestLostAttemptIsRecorded")
	}
	cfg := trellis.Config{Store: url}
	cfg.Worker.LeaseDuration = time.Second
	cfg.Worker.MaxInlineBackoff = time.Millisecond // flaky's backoff suspends the run
	workUntilKilled(t, cfg, lostWorkflow(os.Getenv(envLostLog)))
}

// The "no silent re-execution": a worker process is SIGKILLed while a
// step runs, after its heartbeat reported the step; the worker that takes the
// run over finds the attempt recorded as lost in the history (the API's and
// HistoryList's), numbers its own attempt 2 and counts the lost one in its
// metrics. The step's idempotency key is the same at every attempt, across the
// replay after a backoff and across the takeover (issue 37 item 9).
func TestLostAttemptIsRecorded(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	log := filepath.Join(t.TempDir(), "attempts.log")
	client := open(t, url, func(c *trellis.Config) { c.Worker.Disabled = true })
	wf := lostWorkflow(log)
	h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), client, wf, 7))
	proc := startTestProcess(t, "TestLostAttemptWorkerProcess", envLostStore+"="+url, envLostLog+"="+log)
	defer proc.kill(t)
	// Kill it once its heartbeat reported the hanging step.
	deadline := time.Now().Add(30 * time.Second)
	for {
		run := must[*trellis.Run](t)(client.Get(ctxT(t), h.RunID()))
		if s := run.CurrentStep; s != nil && s.Name == "charge" {
			if s.Attempt != 1 || s.Position != 1 {
				t.Fatalf("reported step = %+v, want charge's attempt 1 at position 1", s)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the worker never reported step charge running: %+v", run)
		}
		time.Sleep(20 * time.Millisecond)
	}
	proc.kill(t)

	metrics := trellis.NewMetrics()
	takeover := open(t, url, func(c *trellis.Config) { c.Worker.LeaseDuration = time.Second; c.Metrics = metrics })
	register(t, takeover, wf)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if got, err := h.Result(ctx); err != nil || got != "charged at attempt 2" {
		t.Fatalf("result after the takeover: %q, %v; want the step's attempt 2", got, err)
	}
	hist := must[[]*trellis.Op](t)(client.History(ctxT(t), h.RunID()))
	if len(hist) != 2 {
		t.Fatalf("history = %+v, want two steps", hist)
	}
	charge := hist[1]
	if charge.Name != "charge" || !charge.Done || charge.Attempts != 2 || len(charge.AttemptLog) != 1 {
		t.Fatalf("charge = %+v, want done at its attempt 2 with one attempt logged", charge)
	}
	lost := charge.AttemptLog[0]
	if lost.Attempt != 1 || lost.Outcome != trellis.AttemptLost || lost.Error.Type != "attempt_lost" ||
		!strings.Contains(lost.Error.Message, "lease expired") {
		t.Fatalf("logged attempt = %+v, want attempt 1 lost", lost)
	}
	if charge.AttemptStartedAt == nil || !charge.AttemptStartedAt.After(lost.FinishedAt.Add(-time.Millisecond)) {
		t.Fatalf("attempt 2 started at %v, before attempt 1 was recorded lost at %v", charge.AttemptStartedAt, lost.FinishedAt)
	}
	if f := hist[0].AttemptLog; len(f) != 1 || f[0].Outcome != trellis.AttemptFailed {
		t.Fatalf("flaky's log = %+v, want its failed attempt", f)
	}
	// The export (the API's history) carries the outcome.
	rec := must[*trellis.RecordedHistory](t)(client.ExportHistory(ctxT(t), h.RunID()))
	exp := must[[]byte](t)(json.Marshal(rec))
	if !strings.Contains(string(exp), `"outcome":"lost"`) {
		t.Fatalf("exported history has no lost outcome: %s", exp)
	}
	if got := stepAttemptCount(t, metrics, "lost-attempt", "lost"); got != 1 {
		t.Fatalf("trellis_step_attempts_total{outcome=lost} = %v, want 1", got)
	}

	// Item 9: one key per step, at every attempt, replay and takeover.
	keys := map[string]map[string]bool{}
	attempts := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(must[[]byte](t)(os.ReadFile(log)))), "\n") {
		f := strings.Fields(line)
		if keys[f[0]] == nil {
			keys[f[0]] = map[string]bool{}
		}
		keys[f[0]][f[2]] = true
		attempts[f[0]] = append(attempts[f[0]], f[1])
	}
	for step, pos := range map[string]int{"flaky": 0, "charge": 1} {
		want := fmt.Sprintf("%s/%d", h.RunID(), pos)
		if len(keys[step]) != 1 || !keys[step][want] {
			t.Errorf("step %s: idempotency keys %v, want only %s", step, keys[step], want)
		}
		if got := strings.Join(attempts[step], ","); got != "1,2" {
			t.Errorf("step %s ran attempts %s, want 1,2", step, got)
		}
	}
}

// stepAttemptCount reads trellis_step_attempts_total for workflow and outcome.
func stepAttemptCount(t *testing.T, m *trellis.Metrics, workflow, outcome string) float64 {
	t.Helper()
	mfs, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "trellis_step_attempts_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["workflow"] == workflow && labels["outcome"] == outcome {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// A job that hangs in its first attempt, ignoring its context past its
// timeout, while its worker's heartbeat goes on: the store ends the lease
// once the timeout plus the grace passed, the attempt is recorded timed out
// and the job runs again (by its retry policy) and succeeds; when the hung
// attempt finally returns, its write is refused.
func TestHungJobTimedOut(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	hungDone := make(chan struct{})
	job := trellis.NewJob("hang-job", func(ctx context.Context, n int) (string, error) {
		if trellis.StepInfo(ctx).Attempt == 1 {
			defer close(hungDone)
			<-release // ignores ctx: hung
			return "stale", nil
		}
		return "fresh", nil
	}, trellis.JobOptions{Timeout: 200 * time.Millisecond,
		Retry: trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Exponential(time.Millisecond, 2, time.Millisecond)}})
	metrics := trellis.NewMetrics()
	c := open(t, storeURL(t), func(c *trellis.Config) {
		c.Worker.LeaseDuration = 2 * time.Second
		c.Worker.HeartbeatInterval = 100 * time.Millisecond
		c.Worker.StepTimeoutGrace = 300 * time.Millisecond
		c.Metrics = metrics
	})
	register(t, c, job)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	t0 := time.Now()
	h := must[*trellis.Handle[string]](t)(trellis.StartJob(ctxT(t), c, job, 1))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if got, err := h.Result(ctx); err != nil || got != "fresh" {
		t.Fatalf("result: %q, %v; want the second attempt's", got, err)
	}
	if d := time.Since(t0); d < 500*time.Millisecond {
		t.Fatalf("the job succeeded after %v, before its first attempt's timeout plus grace", d)
	}
	check := func(when string) {
		t.Helper()
		hist := must[[]*trellis.Op](t)(c.History(ctxT(t), h.RunID()))
		if len(hist) != 1 || !hist[0].Done || hist[0].Attempts != 2 || len(hist[0].AttemptLog) != 1 {
			t.Fatalf("%s: history = %+v, want the job's op done at attempt 2 with one attempt logged", when, hist)
		}
		a := hist[0].AttemptLog[0]
		if a.Attempt != 1 || a.Outcome != trellis.AttemptTimedOut || a.Error.Type != "step_timeout" {
			t.Fatalf("%s: logged attempt = %+v, want attempt 1 timed out", when, a)
		}
		if got := string(hist[0].Result); got != `"fresh"` {
			t.Fatalf("%s: recorded result %s, want the second attempt's", when, got)
		}
	}
	check("after the retry")
	if got := stepAttemptCount(t, metrics, "hang-job", "timed_out"); got != 1 {
		t.Fatalf("trellis_step_attempts_total{outcome=timed_out} = %v, want 1", got)
	}
	close(release)
	select {
	case <-hungDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the hung attempt did not return")
	}
	time.Sleep(300 * time.Millisecond) // its checkpoint, refused
	check("after the hung attempt returned")
	if r := must[*trellis.Run](t)(c.Get(ctxT(t), h.RunID())); r.Status != trellis.StatusSucceeded {
		t.Fatalf("run %s after the hung attempt returned, want succeeded", r.Status)
	}
}
