package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// runs start creates a run of a workflow it holds no code for; a worker that
// registered the workflow runs it.
func TestRunsStart(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	trellisCmd(t, "migrate", "--store", url).ok(t)
	at := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	res := trellisCmd(t, "runs", "start", "greet", "--input", `"ada"`, "--id", "greet-1", "--queue", "mail",
		"--priority", "3", "--start-at", at.Format(time.RFC3339), "--deadline", at.Add(time.Hour).Format(time.RFC3339),
		"--store", url).ok(t)
	contains(t, "start", res.stdout, "Workflow ID:", "greet-1", "Workflow:", "greet", "Queue:", "mail",
		"Priority:", "3", "Status:", "pending", `Input:`, `"ada"`,
		`no live worker serves workflow "greet"`) // as a read shows it
	runs := listRuns(t, url)
	if len(runs) != 1 || runs[0].Queue != "mail" || runs[0].Priority != 3 || !runs[0].AvailableAt.Equal(at) ||
		runs[0].Deadline == nil || !runs[0].Deadline.Equal(at.Add(time.Hour)) {
		t.Fatalf("runs %+v", runs)
	}

	res = trellisCmd(t, "runs", "start", "greet", "--input", `"bob"`, "--id", "greet-2", "--json", "--store", url).ok(t)
	var run struct {
		ID    string          `json:"id"`
		Queue string          `json:"queue"`
		Input json.RawMessage `json:"input"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &run); err != nil || run.Queue != "default" || string(run.Input) != `"bob"` {
		t.Fatalf("json run %+v %v\n%s", run, err, res.stdout)
	}
	wf := trellis.NewWorkflow("greet", func(wc *trellis.Context, name string) (string, error) { return "hi " + name, nil })
	c := openClient(t, url, false, wf)
	defer c.Close()
	done, err := c.Wait(ctxT(t), run.ID)
	if err != nil || done.Status != trellis.StatusSucceeded || string(done.Output) != `"hi bob"` {
		t.Fatalf("started run ended %+v %v", done, err)
	}
}

// Bad arguments are usage errors that create nothing.
func TestRunsStartBadInput(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	trellisCmd(t, "migrate", "--store", url).ok(t)
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	soon := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, args := range [][]string{
		{"--input", `{not json`},
		{"--input", `1`, "--start-at", "tomorrow"},
		{"--input", `1`, "--start-at", "2026-01-02 15:04:05"},
		{"--input", `1`, "--deadline", past},
		{"--input", `1`, "--start-at", soon, "--deadline", soon},
		{"--input", `1`, "--priority", "high"},
		{"--input", `1`, "--retry", `{"max_attempts": 0}`},
		{"--input", `1`, "--retry", `{"max_attempts": 3, "backoff": "1s"}`},
		{"--input", `1`, "--retry", `three`},
	} {
		res := trellisCmd(t, append([]string{"runs", "start", "greet", "--store", url}, args...)...)
		if res.code != 2 || res.stdout != "" {
			t.Errorf("%q: exit %d, want 2\nstdout %s\nstderr %s", args, res.code, res.stdout, res.stderr)
		}
	}
	for _, args := range [][]string{
		{"runs", "start", "--input", "1", "--store", url},
		{"runs", "start", "a", "b", "--store", url},
		{"runs", "start", "a"},
	} {
		if res := trellisCmd(t, args...); res.code != 2 {
			t.Errorf("%q: exit %d, want 2\n%s", args, res.code, res.stderr)
		}
	}
	if runs := listRuns(t, url); len(runs) != 0 {
		t.Fatalf("bad input created %d runs", len(runs))
	}
}
