package trellis_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// The waiting crash test: runs that sleep, wait for an event, wait for a child
// and wait for an approval, while their worker process is killed with SIGKILL and
// events and decisions arrive when no worker is running.

const (
	envWaitCrashStore = "TRELLIS_WAIT_CRASH_STORE"
	waitCrashRuns     = 60
)

type waitCrashResult struct {
	Event     int
	Child     int
	Principal string
}

func waitCrashWorkflows() (*trellis.Workflow[int, int], *trellis.Workflow[int, waitCrashResult]) {
	child := trellis.NewWorkflow("wait-crash-child", func(wc *trellis.Context, n int) (int, error) {
		if err := wc.Sleep(100 * time.Millisecond); err != nil {
			return 0, err
		}
		return trellis.Step(wc, "triple", func(context.Context) (int, error) { return 3 * n, nil })
	})
	parent := trellis.NewWorkflow("wait-crash", func(wc *trellis.Context, n int) (waitCrashResult, error) {
		var r waitCrashResult
		if err := wc.Sleep(time.Duration(200+n*10) * time.Millisecond); err != nil {
			return r, err
		}
		ev, err := trellis.WaitEvent[int](wc, "go", 0)
		if err != nil {
			return r, err
		}
		if r.Child, err = trellis.Child(wc, child, ev); err != nil {
			return r, err
		}
		d, err := trellis.Approval(wc, "ship", trellis.ApprovalOptions{Subject: fmt.Sprint("run ", n)})
		if err != nil {
			return r, err
		}
		r.Event, r.Principal = ev, d.Principal
		return r, nil
	})
	return child, parent
}

// TestWaitCrashWorkerProcess is the worker process of TestCrashRecoveryWhileWaiting.
func TestWaitCrashWorkerProcess(t *testing.T) {
	url := os.Getenv(envWaitCrashStore)
	if url == "" {
		t.Skip("runs only as the worker process of TestCrashRecoveryWhileWaiting")
	}
	cfg := trellis.Config{Store: url}
	cfg.Worker.LeaseDuration = time.Second
	cfg.Worker.PollInterval = 100 * time.Millisecond
	cfg.Worker.MaxInlineBackoff = 10 * time.Millisecond
	child, parent := waitCrashWorkflows()
	workUntilKilled(t, cfg, child, parent)
}

func TestCrashRecoveryWhileWaiting(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test skipped in -short mode")
	}
	crashRecoveryWhileWaiting(t, "sqlite://"+filepath.Join(t.TempDir(), "wait-crash.db"))
}

// crashRecoveryWhileWaiting runs the waiting crash test on the store at url.
func crashRecoveryWhileWaiting(t *testing.T, url string) {
	client := open(t, url, func(c *trellis.Config) { c.Worker.Disabled = true })
	_, parent := waitCrashWorkflows()
	start := func() *testProcess {
		return startTestProcess(t, "TestWaitCrashWorkerProcess", envWaitCrashStore+"="+url)
	}
	kill := func(p *testProcess) { p.kill(t) }
	worker := start()
	defer func() { kill(worker) }()
	ids := make([]string, waitCrashRuns)
	for i := range ids {
		h := must[*trellis.Handle[waitCrashResult]](t)(trellis.Start(ctxT(t), client, parent, i))
		ids[i] = h.RunID()
	}
	restart := func() {
		time.Sleep(time.Duration(300+rand.IntN(500)) * time.Millisecond)
		kill(worker)
	}

	// Kill while runs sleep; send every event while no worker runs.
	restart()
	for i, id := range ids {
		if err := client.SendEvent(ctxT(t), id, "go", i); err != nil {
			t.Fatalf("event to %s: %v", id, err)
		}
	}
	worker = start()

	// Kill while runs wait for children and approvals, deciding approvals while no
	// worker runs; after a few kills, let the last worker finish the work.
	decided := map[string]bool{}
	decide := func() {
		page := must[*trellis.ApprovalList](t)(client.Approvals(ctxT(t), trellis.ApprovalFilter{
			Statuses: []trellis.ApprovalStatus{trellis.ApprovalPending}, Limit: 1000}))
		for _, a := range page.Approvals {
			must[*trellis.ApprovalRecord](t)(client.Approve(ctxT(t), a.ID, "ops-"+a.RunID, ""))
			decided[a.RunID] = true
		}
	}
	began, kills := time.Now(), 1
	for ; kills < 6 && len(decided) < waitCrashRuns; kills++ {
		restart()
		decide()
		worker = start()
	}
	deadline := time.Now().Add(60 * time.Second)
	for len(decided) < waitCrashRuns {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d approvals requested and decided in time", len(decided), waitCrashRuns)
		}
		time.Sleep(50 * time.Millisecond)
		decide()
	}
	t.Logf("all approvals decided after %d kills in %s", kills, time.Since(began).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i, id := range ids {
		run, err := client.Wait(ctx, id)
		if err != nil {
			t.Fatalf("waiting for run %s: %v", id, err)
		}
		if run.Status != trellis.StatusSucceeded {
			t.Fatalf("run %s ended %s: %+v", id, run.Status, run.Error)
		}
		var r waitCrashResult
		if err := (trellis.JSONCodec{}).Unmarshal(run.Output, &r); err != nil {
			t.Fatal(err)
		}
		if want := (waitCrashResult{Event: i, Child: 3 * i, Principal: "ops-" + id}); r != want {
			t.Fatalf("run %s result %+v, want %+v", id, r, want)
		}
		hist := must[[]*trellis.Op](t)(client.History(ctx, id))
		var kinds []string
		for _, op := range hist {
			if !op.Done {
				t.Fatalf("run %s: op %d (%s) not done in a finished run", id, op.Position, op.Kind)
			}
			kinds = append(kinds, string(op.Kind))
		}
		if fmt.Sprint(kinds) != "[timer event child approval]" {
			t.Fatalf("run %s history %v", id, kinds)
		}
	}
}
