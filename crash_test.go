package trellis_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/trellis-dev/trellis"
)

// The crash test runs workers in separate processes (this test binary, re-executed)
// and kills them with SIGKILL at random moments while hundreds of runs are in flight.

const (
	envCrashStore   = "TRELLIS_CRASH_STORE"
	envCrashEffects = "TRELLIS_CRASH_EFFECTS"
	crashRuns       = 300
	crashSteps      = 3
)

// crashStep is one step's recorded result: a fresh nonce, and the nonce of the
// previous step as this execution saw it.
type crashStep struct {
	Nonce string
	Prev  string
}

// crashWorkflow runs crashSteps steps; each appends "run pos nonce" to the effects
// file before returning, so the test knows every execution that happened.
func crashWorkflow(effects string) *trellis.Workflow[int, []string] {
	return trellis.NewWorkflow("crash", func(wc *trellis.Context, n int) ([]string, error) {
		prev, nonces := "", []string{}
		if err := wc.Set("id", wc.UUID()); err != nil {
			return nil, err
		}
		for i := range crashSteps {
			s, err := trellis.Step(wc, fmt.Sprintf("step-%d", i), func(ctx context.Context) (crashStep, error) {
				time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond) // widen the window for kills
				nonce := uuid.NewString()
				info := trellis.StepInfo(ctx)
				if err := appendLine(effects, fmt.Sprintf("%s %d %s\n", info.RunID, info.Position, nonce)); err != nil {
					return crashStep{}, err
				}
				return crashStep{Nonce: nonce, Prev: prev}, nil
			})
			if err != nil {
				return nil, err
			}
			prev, nonces = s.Nonce, append(nonces, s.Nonce)
		}
		return nonces, nil
	})
}

func appendLine(path, line string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteString(line)
	return err
}

// TestCrashWorkerProcess is the worker process of TestCrashRecovery; it runs until killed.
func TestCrashWorkerProcess(t *testing.T) {
	url := os.Getenv(envCrashStore)
	if url == "" {
		t.Skip("runs only as the worker process of TestCrashRecovery")
	}
	cfg := trellis.Config{Store: url}
	cfg.Worker.LeaseDuration = time.Second
	cfg.Worker.PollInterval = 50 * time.Millisecond
	workUntilKilled(t, cfg, crashWorkflow(os.Getenv(envCrashEffects)))
}

func TestCrashRecovery(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	dir := t.TempDir()
	crashRecovery(t, "sqlite://"+filepath.Join(dir, "crash.db"), filepath.Join(dir, "effects.log"), killWorkers)
}

// disruption is what a crash scenario does to the system while runs are started
// and executed: round counts from 0; it returns the worker to go on with.
type disruption func(t *testing.T, round int, w *crashWorker, url, effects string) *crashWorker

// killWorkers kills the worker process with SIGKILL and starts another.
func killWorkers(t *testing.T, _ int, w *crashWorker, url, effects string) *crashWorker {
	w.kill(t)
	return startCrashWorker(t, url, effects)
}

// crashRecovery starts crashRuns runs on the store at url while disrupt strikes six
// times, then checks that every acknowledged start ran to success with each step
// recorded once. A start that fails (the database may be restarting) is retried
// with the same workflow ID, returning the run if the failed attempt created it.
func crashRecovery(t *testing.T, url, effects string, disrupt disruption) {
	client := open(t, url, func(c *trellis.Config) { c.Worker.Disabled = true })
	wf := crashWorkflow(effects)

	worker := startCrashWorker(t, url, effects)
	acked := make(chan string, crashRuns)
	var starting sync.WaitGroup
	starting.Add(1)
	go func() { // starts runs while the system is disrupted
		defer starting.Done()
		defer close(acked)
		for i := range crashRuns {
			id, err := startRetrying(client, wf, i)
			if err != nil {
				t.Errorf("start %d: %v", i, err)
				return
			}
			acked <- id
			if i%10 == 0 {
				time.Sleep(20 * time.Millisecond)
			}
		}
	}()
	for round := range 6 {
		time.Sleep(time.Duration(150+rand.IntN(400)) * time.Millisecond)
		worker = disrupt(t, round, worker, url, effects)
	}
	starting.Wait()
	defer worker.kill(t)
	var ids []string
	for id := range acked {
		ids = append(ids, id)
	}
	if len(ids) != crashRuns {
		t.Fatalf("%d starts acknowledged, want %d", len(ids), crashRuns)
	}
	waitAllSucceeded(t, client, ids)
	verifyCrashRuns(t, client, ids, readEffects(t, effects))
}

// startRetrying starts run i, retrying failed attempts for up to 30 seconds.
func startRetrying(c *trellis.Client, wf *trellis.Workflow[int, []string], i int) (string, error) {
	deadline := time.Now().Add(30 * time.Second)
	opts := trellis.StartOptions{ID: fmt.Sprintf("crash-%d", i), Reuse: trellis.ReuseReturnExisting}
	for {
		h, err := trellis.Start(context.Background(), c, wf, i, opts)
		if err == nil {
			return h.RunID(), nil
		}
		if time.Now().After(deadline) {
			return "", err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// crashWorker is a worker process of the crash test.
type crashWorker = testProcess

func startCrashWorker(t *testing.T, url, effects string) *crashWorker {
	t.Helper()
	return startTestProcess(t, "TestCrashWorkerProcess", envCrashStore+"="+url, envCrashEffects+"="+effects)
}

func waitAllSucceeded(t *testing.T, c *trellis.Client, ids []string) {
	t.Helper()
	// Generous: runs of a killed worker wait out their leases, and CI's
	// machine may be loaded (a bound of 45 s was crossed there).
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, id := range ids {
		run, err := c.Wait(ctx, id)
		if err != nil {
			t.Fatalf("waiting for run %s: %v", id, err)
		}
		if run.Status != trellis.StatusSucceeded {
			t.Fatalf("run %s ended %s: %+v", id, run.Status, run.Error)
		}
	}
}

// readEffects returns, per "run/position", the nonces of every execution of a step.
func readEffects(t *testing.T, path string) map[string][]string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.Fields(sc.Text())
		if len(parts) != 3 {
			continue // a line cut short by SIGKILL
		}
		key := parts[0] + "/" + parts[1]
		out[key] = append(out[key], parts[2])
	}
	return out
}

// verifyCrashRuns checks that each run recorded every step exactly once, that each
// recorded result came from a real execution, and that every step saw the recorded
// result of the step before it (no step ran on a result that was later lost).
func verifyCrashRuns(t *testing.T, c *trellis.Client, ids []string, effects map[string][]string) {
	t.Helper()
	reexecuted := 0
	for _, id := range ids {
		hist, err := c.History(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		prev, steps := "", 0
		for i, op := range hist {
			if op.Position != i || !op.Done {
				t.Fatalf("run %s: op %d at position %d done=%v", id, i, op.Position, op.Done)
			}
			if op.Kind != trellis.OpStep {
				continue
			}
			steps++
			var s crashStep
			if err := (trellis.JSONCodec{}).Unmarshal(op.Result, &s); err != nil {
				t.Fatalf("run %s op %d: %v", id, i, err)
			}
			execs := effects[fmt.Sprintf("%s/%d", id, op.Position)]
			if !contains(execs, s.Nonce) {
				t.Fatalf("run %s step %d: recorded result %s was never produced by an execution (%v)", id, i, s.Nonce, execs)
			}
			if s.Prev != prev {
				t.Fatalf("run %s step %d ran on %q but the recorded previous result is %q", id, i, s.Prev, prev)
			}
			reexecuted += len(execs) - 1
			prev = s.Nonce
		}
		if steps != crashSteps {
			t.Fatalf("run %s recorded %d steps, want %d", id, steps, crashSteps)
		}
	}
	t.Logf("%d runs verified; %d step executions were repeated after kills (allowed: at least once)", len(ids), reexecuted)
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
