package main

import (
	"context"
	"errors"
	"regexp"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// TestRunsHistoryWorkflowRetries: `runs get` shows a run's workflow attempt
// and its start's policy, `runs history` every failed run attempt with its
// error, times and the steps run again, and the step's attempts numbered on.
func TestRunsHistoryWorkflowRetries(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	var calls atomic.Int64
	wf := trellis.NewWorkflow("retried", func(wc *trellis.Context, n int) (int, error) {
		return trellis.Step(wc, "charge", func(ctx context.Context) (int, error) {
			if calls.Add(1) <= 2 {
				return 0, errors.New("card service down")
			}
			return n * 2, nil
		}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 1}})
	})
	c := openClient(t, url, false, wf)
	defer c.Close()
	h, err := trellis.Start(ctxT(t), c, wf, 21, trellis.StartOptions{ID: "retried-1",
		Retry: &trellis.RetryPolicy{MaxAttempts: 4, Backoff: trellis.Fixed(20 * time.Millisecond)}})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := h.Result(ctxT(t)); err != nil || out != 42 {
		t.Fatalf("result %d, %v", out, err)
	}
	res := trellisCmd(t, "runs", "get", h.RunID(), "--store", url).ok(t)
	contains(t, "get", res.stdout, "Workflow attempt:", "3 (2 failed attempts retried: runs history lists them)",
		"Retry policy:", "4 attempts, backoff from 20ms")
	res = trellisCmd(t, "runs", "history", h.RunID(), "--store", url).ok(t)
	contains(t, "history", res.stdout, "run attempts (workflow retries):",
		"failed steps run again: charge (position 0, 1 attempts)", "failed steps run again: charge (position 0, 2 attempts)",
		"  attempt 3  due ", "succeeded", "attempt 1 failed at ", "attempt 2 failed at ")
	for _, re := range []string{`attempt 1  started \S+  failed \S+: .*card service down`, `attempt 2  started \S+  failed \S+: .*card service down`,
		`step\s+charge\s+3\s+42`} {
		if !regexp.MustCompile(re).MatchString(res.stdout) {
			t.Errorf("history does not match %s:\n%s", re, res.stdout)
		}
	}
}

// TestRunsStartRetry: runs start --retry stores the run's workflow retry
// policy, which the worker's store applies.
func TestRunsStartRetry(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	trellisCmd(t, "migrate", "--store", url).ok(t)
	res := trellisCmd(t, "runs", "start", "flaky", "--input", "1", "--retry", `{"max_attempts": 3, "initial_backoff": "10ms"}`,
		"--store", url).ok(t)
	contains(t, "start", res.stdout, "Retry policy:", "3 attempts, backoff from 10ms")
	runs := listRuns(t, url)
	if len(runs) != 1 || runs[0].Retry == nil || runs[0].Retry.MaxAttempts != 3 {
		t.Fatalf("runs %+v", runs)
	}
	var calls atomic.Int64
	wf := trellis.NewWorkflow("flaky", func(wc *trellis.Context, n int) (int, error) {
		if calls.Add(1) < 3 {
			return 0, errors.New("not yet")
		}
		return n, nil
	})
	c := openClient(t, url, false, wf)
	defer c.Close()
	done, err := c.Wait(ctxT(t), runs[0].ID)
	if err != nil || done.Status != trellis.StatusSucceeded || done.WorkflowAttempt != 3 {
		t.Fatalf("run ended %+v %v", done, err)
	}
}
