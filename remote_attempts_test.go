package trellis_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/server"
)

// Environment of TestRemoteAttemptsWorkerProcess.
const (
	envRemoteAttemptsServer  = "TRELLIS_REMOTE_ATTEMPTS_SERVER"
	envRemoteAttemptsToken   = "TRELLIS_REMOTE_ATTEMPTS_TOKEN"
	envRemoteAttemptsRelease = "TRELLIS_REMOTE_ATTEMPTS_RELEASE"
)

// remoteHangJob hangs at its first attempt in the worker process, ignoring
// its context past its timeout, until the release file exists; its other
// attempts, and every attempt elsewhere, return at once.
var remoteHangJob = trellis.NewJob("remote-hang", func(ctx context.Context, n int) (string, error) {
	release := os.Getenv(envRemoteAttemptsRelease)
	if release == "" || trellis.StepInfo(ctx).Attempt > 1 {
		return "fresh", nil
	}
	for {
		if _, err := os.Stat(release); err == nil {
			return "stale", nil
		}
		time.Sleep(10 * time.Millisecond)
	}
}, trellis.JobOptions{Timeout: 200 * time.Millisecond,
	Retry: trellis.RetryPolicy{MaxAttempts: 2, Backoff: trellis.Exponential(time.Millisecond, 2, time.Millisecond)}})

// remoteLostFlow's step hangs in the worker process (killed while it runs)
// and returns at once elsewhere.
var remoteLostFlow = trellis.NewWorkflow("remote-lost", func(wc *trellis.Context, n int) (int, error) {
	return trellis.Step(wc, "charge", func(ctx context.Context) (int, error) {
		if os.Getenv(envRemoteAttemptsRelease) != "" {
			<-ctx.Done()
			return 0, ctx.Err()
		}
		return trellis.StepInfo(ctx).Attempt, nil
	})
})

// TestRemoteAttemptsWorkerProcess is the remote worker process of
// TestRemoteHungStepTimedOut and TestRemoteLostAttempt.
func TestRemoteAttemptsWorkerProcess(t *testing.T) {
	base := os.Getenv(envRemoteAttemptsServer)
	if base == "" {
		t.Skip("runs only as the worker process of TestRemoteHungStepTimedOut and TestRemoteLostAttempt")
	}
	cfg := trellis.Config{Server: base, Token: os.Getenv(envRemoteAttemptsToken)}
	cfg.Worker.LeaseDuration = 2 * time.Second
	cfg.Worker.HeartbeatInterval = 100 * time.Millisecond
	cfg.Worker.StepTimeoutGrace = time.Hour // the server's applies, not the worker's
	w, err := trellis.NewWorker(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(context.Background(), remoteHangJob, remoteLostFlow); err != nil {
		t.Fatal(err)
	}
	if err := w.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// startAttemptsServer starts a server with a short step timeout grace and
// metrics, a worker token, a client on its store and the worker process.
func startAttemptsServer(t *testing.T, url, release string) (*workerServer, *trellis.Metrics, *trellis.Client, *testProcess) {
	metrics := trellis.NewMetrics()
	s := newWorkerServerWith(t, url, func(c *server.Config) {
		c.StepTimeoutGrace = 300 * time.Millisecond
		c.Metrics = metrics
	})
	wtok := s.token(t, "w", auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
	client := open(t, "", func(c *trellis.Config) { c.Store, c.Backend, c.Worker.Disabled = "", s.st, true })
	proc := startTestProcess(t, "TestRemoteAttemptsWorkerProcess", envRemoteAttemptsServer+"="+s.base,
		envRemoteAttemptsToken+"="+wtok, envRemoteAttemptsRelease+"="+release)
	t.Cleanup(func() { proc.kill(t) })
	return s, metrics, client, proc
}

// A remote worker process hangs in a job's attempt, ignoring its context past
// its timeout, while its heartbeat goes on: the server ends the lease once the
// timeout plus its grace (not the worker's) passed, records the attempt timed
// out, and the job runs again (here on the same worker, which is alive) and
// succeeds; when the hung attempt returns, the server refuses its write.
func TestRemoteHungStepTimedOut(t *testing.T) {
	for name, url := range remoteStores() {
		t.Run(name, func(t *testing.T) {
			release := filepath.Join(t.TempDir(), "release")
			_, metrics, client, _ := startAttemptsServer(t, url(t), release)
			h := must[*trellis.Handle[string]](t)(trellis.StartJob(ctxT(t), client, remoteHangJob, 1))
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if got, err := h.Result(ctx); err != nil || got != "fresh" {
				t.Fatalf("result: %q, %v; want the second attempt's", got, err)
			}
			check := func(when string) {
				t.Helper()
				hist := must[[]*trellis.Op](t)(client.History(ctxT(t), h.RunID()))
				if len(hist) != 1 || !hist[0].Done || hist[0].Attempts != 2 || len(hist[0].AttemptLog) != 1 ||
					string(hist[0].Result) != `"fresh"` {
					t.Fatalf("%s: history = %+v, want the job done at attempt 2 with one attempt logged", when, hist)
				}
				if a := hist[0].AttemptLog[0]; a.Attempt != 1 || a.Outcome != trellis.AttemptTimedOut {
					t.Fatalf("%s: logged attempt = %+v, want attempt 1 timed out", when, a)
				}
			}
			check("after the retry")
			if got := stepAttemptCount(t, metrics, "remote-hang", "timed_out"); got != 1 {
				t.Fatalf("server's trellis_step_attempts_total{outcome=timed_out} = %v, want 1", got)
			}
			if err := os.WriteFile(release, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // the hung attempt returns and its write is refused
			check("after the hung attempt returned")
			if r := must[*trellis.Run](t)(client.Get(ctxT(t), h.RunID())); r.Status != trellis.StatusSucceeded {
				t.Fatalf("run %s, want succeeded", r.Status)
			}
		})
	}
}

// A remote worker process is SIGKILLed while a step runs, after its heartbeat
// reported it through the server: another remote worker takes the run over,
// the attempt is recorded lost and counted in the server's metrics, and the
// step's next attempt is numbered 2.
func TestRemoteLostAttempt(t *testing.T) {
	for name, url := range remoteStores() {
		t.Run(name, func(t *testing.T) {
			s, metrics, client, proc := startAttemptsServer(t, url(t), "unused")
			h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), client, remoteLostFlow, 1))
			deadline := time.Now().Add(30 * time.Second)
			for {
				run := must[*trellis.Run](t)(client.Get(ctxT(t), h.RunID()))
				if run.CurrentStep != nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the worker never reported its step: %+v", run)
				}
				time.Sleep(20 * time.Millisecond)
			}
			proc.kill(t)
			wtok := s.token(t, "w2", auth.Grant{Role: auth.RoleWorker, Namespace: "default"})
			startRemoteWorker(t, s.base, wtok, remoteLostFlow)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if got, err := h.Result(ctx); err != nil || got != 2 {
				t.Fatalf("result %d, %v; want the step's attempt 2", got, err)
			}
			hist := must[[]*trellis.Op](t)(client.History(ctxT(t), h.RunID()))
			if len(hist) != 1 || hist[0].Attempts != 2 || len(hist[0].AttemptLog) != 1 ||
				hist[0].AttemptLog[0].Outcome != trellis.AttemptLost {
				t.Fatalf("history = %+v, want attempt 1 lost and the step done at 2", hist)
			}
			if got := stepAttemptCount(t, metrics, "remote-lost", "lost"); got != 1 {
				t.Fatalf("server's trellis_step_attempts_total{outcome=lost} = %v, want 1", got)
			}
		})
	}
}
