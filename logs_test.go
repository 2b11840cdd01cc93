package trellis_test

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/pgtest"
)

// Every log line the engine, the worker and the client write about a run, in
// runs that succeed, retry a failed step, wait for an event, are cancelled and
// lose their lease, carries the same keys: run_id and workflow, and
// run_attempt (the run's claim count) or, on a line about a step attempt,
// step and attempt (the step's attempt); no line names a run under another
// key.
func TestLogLinesCarryRunStepAndAttempt(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	stepped := make(chan string, 10) // run IDs whose blocking step began
	var retries, losses atomic.Int32
	block := func(ctx context.Context) (int, error) {
		stepped <- trellis.StepInfo(ctx).RunID
		<-ctx.Done()
		return 0, ctx.Err()
	}
	wfs := []trellis.Registrable{
		trellis.NewWorkflow("log-ok", func(wc *trellis.Context, in int) (int, error) {
			wc.Logger().Info("in the workflow")
			return trellis.Step(wc, "work", func(ctx context.Context) (int, error) {
				trellis.StepLogger(ctx).Info("in the step")
				return in, nil
			})
		}),
		trellis.NewWorkflow("log-retry", func(wc *trellis.Context, in int) (int, error) {
			return trellis.Step(wc, "flaky", func(ctx context.Context) (int, error) {
				if retries.Add(1) == 1 {
					return 0, errors.New("first attempt fails")
				}
				return in, nil
			})
		}),
		trellis.NewWorkflow("log-wait", func(wc *trellis.Context, _ int) (string, error) {
			return trellis.WaitEvent[string](wc, "go", 0)
		}),
		trellis.NewWorkflow("log-cancel", func(wc *trellis.Context, _ int) (int, error) {
			return trellis.Step(wc, "blocks", block)
		}),
		trellis.NewWorkflow("log-lost", func(wc *trellis.Context, in int) (int, error) {
			return trellis.Step(wc, "blocks-once", func(ctx context.Context) (int, error) {
				if losses.Add(1) == 1 {
					return block(ctx)
				}
				return in, nil
			})
		}),
	}
	storeURL := pgtest.SchemaURL(t)
	c := open(t, storeURL, func(cfg *trellis.Config) {
		cfg.Logger = slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		cfg.Worker.LeaseDuration = time.Second
	})
	register(t, c, wfs...)
	start := func(wf string) string {
		return must[*trellis.Run](t)(c.StartRaw(ctxT(t), wf, []byte("7"), trellis.StartOptions{})).ID
	}
	workflowOf := map[string]string{}
	for _, wf := range []string{"log-ok", "log-retry", "log-wait", "log-cancel", "log-lost"} {
		workflowOf[start(wf)] = wf
	}
	idOf := map[string]string{}
	for id, wf := range workflowOf {
		idOf[wf] = id
	}
	// The waiting run gets its event; the blocked ones are cancelled and
	// fenced off (their lease token changed, as another worker's claim
	// would), once each is in its step.
	waitFor(t, func() bool {
		r := must[*trellis.Run](t)(c.Get(ctxT(t), idOf["log-wait"]))
		return r.Status == trellis.StatusWaiting
	})
	if err := c.SendEvent(ctxT(t), idOf["log-wait"], "go", "now"); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		switch id := <-stepped; workflowOf[id] {
		case "log-cancel":
			if err := c.Cancel(ctxT(t), id); err != nil {
				t.Fatal(err)
			}
		case "log-lost":
			stealLease(t, storeURL, id)
		}
	}
	want := map[string]trellis.Status{"log-ok": trellis.StatusSucceeded, "log-retry": trellis.StatusSucceeded,
		"log-wait": trellis.StatusSucceeded, "log-cancel": trellis.StatusCancelled, "log-lost": trellis.StatusSucceeded}
	for wf, id := range idOf {
		if r := must[*trellis.Run](t)(c.Wait(ctxT(t), id)); r.Status != want[wf] {
			t.Fatalf("%s ended %s, want %s", wf, r.Status, want[wf])
		}
	}
	waitFor(t, func() bool { return strings.Count(buf.String(), `"msg":"run attempt ended"`) >= 7 })

	seen := map[string]map[string]bool{} // message → workflows it was logged about
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		for _, k := range []string{"run", "runID", "run_attempts", "claims"} {
			if _, ok := rec[k]; ok {
				t.Errorf("line names a run or its claims under key %q, not run_id/run_attempt: %s", k, line)
			}
		}
		if !aboutARun(rec, workflowOf) {
			continue
		}
		id, _ := rec["run_id"].(string)
		wf := workflowOf[id]
		msg, _ := rec["msg"].(string)
		if seen[msg] == nil {
			seen[msg] = map[string]bool{}
		}
		seen[msg][wf] = true
		if wf == "" || rec["workflow"] != wf {
			t.Errorf("line about a run lacks its run_id and workflow: %s", line)
		}
		_, hasStep := rec["step"]
		_, hasAttempt := rec["attempt"]
		if hasStep != hasAttempt {
			t.Errorf("a step line has step and attempt (the step's), other run lines neither: %s", line)
		}
		if n, ok := rec["run_attempt"].(float64); !hasStep && (!ok || n < 1) {
			t.Errorf("line about a run lacks run_attempt: %s", line)
		}
	}
	for msg, wfs := range map[string][]string{
		"executing run":       {"log-ok", "log-retry", "log-wait", "log-cancel", "log-lost"},
		"run attempt ended":   {"log-ok", "log-retry", "log-wait", "log-cancel", "log-lost"},
		"in the workflow":     {"log-ok"},
		"in the step":         {"log-ok"},
		"step attempt failed": {"log-retry"},
		"run waiting":         {"log-wait"},
		"lease lost: another worker may have taken the run over":                        {"log-lost"},
		"abandoning run: lease lost or store failing; another worker will take it over": {"log-lost"},
	} {
		for _, wf := range wfs {
			if !seen[msg][wf] {
				t.Errorf("no line %q about the %s run (lines about runs: %v)", msg, wf, seen)
			}
		}
	}
}

// aboutARun reports whether a log record is about one of the runs: it has a
// run_id, or a value (other than an error's text) that is one's ID.
func aboutARun(rec map[string]any, runs map[string]string) bool {
	if _, ok := rec["run_id"]; ok {
		return true
	}
	for k, v := range rec {
		if s, ok := v.(string); ok && k != "err" && runs[s] != "" {
			return true
		}
	}
	return false
}

// stealLease changes the lease token of run id in the Postgres store at
// storeURL, as another worker's claim would: its worker's next heartbeat finds
// the lease lost.
func stealLease(t *testing.T, storeURL, id string) {
	t.Helper()
	u, err := url.Parse(storeURL)
	if err != nil {
		t.Fatal(err)
	}
	schema := u.Query().Get("schema")
	conn, err := pgx.Connect(ctxT(t), pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tag, err := conn.Exec(ctxT(t), "UPDATE "+pgx.Identifier{schema, "runs"}.Sanitize()+" SET lease_token = lease_token + 1 WHERE id = $1", id)
	if err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("changing the lease of run %s: %v (%d rows)", id, err, tag.RowsAffected())
	}
}
