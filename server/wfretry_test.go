package server

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
)

// TestStartRetryPolicy: a start's retry object is stored with the run and
// shown with it (and in its history); a bad one is a 400 naming the field,
// in a start and in a batch, and creates nothing. The OpenAPI document
// describes it.
func TestStartRetryPolicy(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, url(t))
			run := e.start("echo", map[string]any{"a": 1}, map[string]any{"retry": map[string]any{
				"max_attempts": 4, "initial_backoff": "2s", "factor": 3, "max_backoff": "1m", "jitter": 0.2,
				"non_retryable_types": []string{"*app.Declined"}}})
			want := trellis.RunRetry{MaxAttempts: 4, InitialBackoff: trellis.Duration(2 * time.Second), Factor: 3,
				MaxBackoff: trellis.Duration(time.Minute), Jitter: 0.2, NonRetryableTypes: []string{"*app.Declined"}}
			if r := run.Retry; r == nil || r.MaxAttempts != want.MaxAttempts || r.InitialBackoff != want.InitialBackoff ||
				r.Factor != want.Factor || r.MaxBackoff != want.MaxBackoff || r.Jitter != want.Jitter ||
				len(r.NonRetryableTypes) != 1 || run.WorkflowAttempt != 1 {
				t.Fatalf("started run: retry %+v, workflow attempt %d", run.Retry, run.WorkflowAttempt)
			}
			done := e.waitRun(run.ID)
			if done.Status != trellis.StatusSucceeded || done.Retry == nil {
				t.Fatalf("run: %+v", done)
			}
			var hist trellis.RecordedHistory
			e.do("GET", "/v1/namespaces/default/runs/"+run.ID+"/history", "reader", nil).want(t, 200).decode(t, &hist)
			if hist.Run.Retry == nil || hist.Run.WorkflowAttempt != 1 {
				t.Fatalf("history's run: retry %+v, attempt %d", hist.Run.Retry, hist.Run.WorkflowAttempt)
			}
			// Defaults: only max_attempts.
			run = e.start("echo", nil, map[string]any{"retry": map[string]any{"max_attempts": 1}})
			if run.Retry == nil || run.Retry.MaxAttempts != 1 {
				t.Fatalf("run with max_attempts only: %+v", run.Retry)
			}

			before := e.runCount()
			for _, bad := range []struct {
				retry any
				says  string
			}{
				{map[string]any{}, "retry.max_attempts"},
				{map[string]any{"max_attempts": 0}, "retry.max_attempts"},
				{map[string]any{"max_attempts": -2}, "retry.max_attempts"},
				{map[string]any{"max_attempts": 100000}, "retry.max_attempts"},
				{map[string]any{"max_attempts": 3, "initial_backoff": "-1s"}, "retry.initial_backoff"},
				{map[string]any{"max_attempts": 3, "initial_backoff": "soon"}, "duration"},
				{map[string]any{"max_attempts": 3, "initial_backoff": "1h", "max_backoff": "1m"}, "max_backoff"},
				{map[string]any{"max_attempts": 3, "factor": 0.5}, "retry.factor"},
				{map[string]any{"max_attempts": 3, "jitter": 1.5}, "retry.jitter"},
				{map[string]any{"max_attempts": 3, "non_retryable_types": []string{""}}, "retry.non_retryable_types"},
				{map[string]any{"max_attempts": 3, "backoff": "1s"}, "backoff"},
				{"three", "retry"},
			} {
				body := map[string]any{"workflow": "echo", "retry": bad.retry}
				p := e.do("POST", "/v1/namespaces/default/runs", "producer", body).problem(t, 400, "invalid_argument")
				if !strings.Contains(p.Detail, bad.says) {
					t.Errorf("start with retry %v: %q, want it to name %s", bad.retry, p.Detail, bad.says)
				}
				batch := map[string]any{"runs": []any{map[string]any{"workflow": "echo"}, body}}
				p = e.do("POST", "/v1/namespaces/default/runs:batch", "producer", batch).problem(t, 400, "invalid_argument")
				if !strings.Contains(p.Detail, bad.says) {
					t.Errorf("batch with retry %v: %q", bad.retry, p.Detail)
				}
			}
			if n := e.runCount(); n != before {
				t.Fatalf("refused starts created runs: %d, want %d", n, before)
			}

			var doc map[string]any
			e.do("GET", "/v1/openapi.json", "", nil).want(t, 200).decode(t, &doc)
			b, _ := json.Marshal(doc)
			for _, s := range []string{`"max_attempts"`, `"initial_backoff"`, `"non_retryable_types"`, `"workflow_attempts"`, `"retry_at"`} {
				if !strings.Contains(string(b), s) {
					t.Errorf("the OpenAPI document does not describe %s", s)
				}
			}
		})
	}
}

// TestUIRunAttempts: the run page shows a retried run's attempt and every
// failed attempt with its error, times and the steps run again.
func TestUIRunAttempts(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			e := newEnv(t, url(t))
			ctx := t.Context()
			// A run of a workflow no worker serves, driven through the store
			// as a worker would: its step fails, then the run, and a retry
			// follows.
			res, err := e.st.RunCreate(ctx, &store.RunCreateParams{Namespace: "default", ID: "ui-retried", WorkflowID: "ui-retried",
				Workflow: "ui-retry", Queue: "default", Retry: &store.RunRetry{MaxAttempts: 3, InitialBackoff: store.Duration(time.Hour)}})
			if err != nil {
				t.Fatal(err)
			}
			claimed, err := e.st.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "default", Workflows: []string{"ui-retry"},
				Worker: "w", Max: 1, LeaseDuration: time.Minute})
			if err != nil || len(claimed.Runs) != 1 {
				t.Fatalf("claim: %v %v", claimed, err)
			}
			cr := claimed.Runs[0]
			now := time.Now()
			fail := &store.ErrorInfo{Message: "card service <down>"}
			out, err := e.st.Checkpoint(ctx, &store.CheckpointParams{Lease: cr.Lease(), Status: store.StatusFailed, Error: fail,
				Ops: []*store.Op{{Position: 0, Kind: store.OpStep, Name: "charge", Done: true, Error: fail, Attempts: 2, StartedAt: now, FinishedAt: &now}},
				Attempts: []store.Attempt{{Position: 0, Attempt: 1, Error: *fail, StartedAt: now, FinishedAt: now},
					{Position: 0, Attempt: 2, Error: *fail, StartedAt: now, FinishedAt: now}}})
			if err != nil || out.RetryAt == nil {
				t.Fatalf("failing checkpoint: %+v %v", out, err)
			}
			page := string(e.uiSession("reader").get("/ui/default/runs/"+res.Run.ID).want(t, 200).body)
			for _, want := range []string{`id="run-attempts"`, "attempt 1", "card service &lt;down&gt;", "failed steps run again: charge (2 attempts)",
				`id="workflow-attempt">2 of at most 3`, "workflow retry: attempt 1 failed"} {
				if !strings.Contains(page, want) {
					t.Errorf("the run page lacks %q", want)
				}
			}
		})
	}
}
