package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/trellistest"
)

func TestRunsList(t *testing.T) {
	t.Parallel()
	s := seed(t)
	res := trellisCmd(t, "runs", "list", "--store", s.url).ok(t)
	contains(t, "list", res.stdout, "ID", "WORKFLOW ID", "WORKFLOW", "STATUS", "CLAIMS", "CREATED",
		s.okRun, s.failedRun, "succeeded", "failed", "card declined")

	res = trellisCmd(t, "runs", "list", "--status", "failed", "--store", s.url).ok(t)
	if !strings.Contains(res.stdout, s.failedRun) || strings.Contains(res.stdout, s.okRun) {
		t.Errorf("--status failed:\n%s", res.stdout)
	}
	res = trellisCmd(t, "runs", "list", "--status", "pending,blocked", "--workflow", "ok", "--store", s.url).ok(t)
	if res.stdout != "no runs\n" {
		t.Errorf("no match: %q", res.stdout)
	}

	res = trellisCmd(t, "runs", "list", "--store", s.url, "--status", "succeeded,done")
	if res.code != 2 || !strings.Contains(res.stderr, `invalid --status "done": want one of pending, running, waiting, blocked, succeeded, failed, cancelled`) {
		t.Errorf("bad status: exit %d\n%s", res.code, res.stderr)
	}
}

func TestRunsListPages(t *testing.T) {
	t.Parallel()
	s := seed(t)
	res := trellisCmd(t, "runs", "list", "--limit", "1", "--json", "--store", s.url).ok(t)
	var page struct {
		Runs []struct {
			ID     string          `json:"id"`
			Status trellis.Status  `json:"status"`
			Input  json.RawMessage `json:"input"`
		} `json:"runs"`
		NextCursor string `json:"next_page_token"`
	}
	if err := json.Unmarshal([]byte(res.stdout), &page); err != nil {
		t.Fatalf("%v\n%s", err, res.stdout)
	}
	if len(page.Runs) != 1 || page.Runs[0].ID != s.failedRun || string(page.Runs[0].Input) != "21" || page.NextCursor == "" {
		t.Fatalf("first page %+v", page)
	}
	res = trellisCmd(t, "runs", "list", "--limit", "1", "--cursor", page.NextCursor, "--store", s.url).ok(t)
	if !strings.Contains(res.stdout, s.okRun) || strings.Contains(res.stdout, "next cursor") {
		t.Errorf("second and last page:\n%s", res.stdout)
	}
	// As a table: the data on stdout, the next page's cursor on stderr.
	res = trellisCmd(t, "runs", "list", "--limit", "1", "--store", s.url).ok(t)
	if !strings.Contains(res.stdout, s.failedRun) || strings.Contains(res.stdout, "cursor") || res.stderr != "next cursor: "+page.NextCursor+"\n" {
		t.Errorf("first page as a table: stdout\n%s\nstderr %q", res.stdout, res.stderr)
	}
	res = trellisCmd(t, "runs", "list", "--limit", "1", "--cursor", strings.TrimSpace(strings.TrimPrefix(res.stderr, "next cursor: ")), "--store", s.url).ok(t)
	if !strings.Contains(res.stdout, s.okRun) || res.stderr != "" {
		t.Errorf("second page as a table: stdout\n%s\nstderr %q", res.stdout, res.stderr)
	}
	if res := trellisCmd(t, "runs", "list", "--cursor", "junk", "--store", s.url); res.code != 2 {
		t.Errorf("bad cursor: exit %d %s", res.code, res.stderr)
	}
}

func TestRunsGetAndHistory(t *testing.T) {
	t.Parallel()
	s := seed(t)
	// Flags after the id, and a workflow ID for a reference.
	res := trellisCmd(t, "runs", "get", s.okID, "--store", s.url).ok(t)
	contains(t, "get", res.stdout, "ID:", s.okRun, "Workflow ID:", s.okID, "Status:", "succeeded",
		"Input:", "21", "Output:", "42", "Claims:", "1 (times a worker took the run)", "Created at:", "Finished at:")

	res = trellisCmd(t, "runs", "history", "--store", s.url, s.okRun).ok(t)
	contains(t, "history", res.stdout, "POS", "KIND", "NAME", "STEP ATTEMPTS", "step", "flaky", "42",
		"  attempt 1 failed at ", "first attempt fails")
	if !regexp.MustCompile(`step\s+flaky\s+2\s+42`).MatchString(res.stdout) {
		t.Errorf("history does not show the step's 2 attempts:\n%s", res.stdout)
	}
	res = trellisCmd(t, "runs", "get", s.failedRun, "--store", s.url).ok(t)
	contains(t, "get failed", res.stdout, "failed after 1 attempt(s): card declined")
	if strings.Contains(res.stdout, "errors.") || strings.Contains(res.stdout, "(type") {
		t.Errorf("a plain error shows a Go type:\n%s", res.stdout)
	}
	res = trellisCmd(t, "runs", "history", s.failedRun, "--store", s.url).ok(t)
	contains(t, "failed history", res.stdout, "doomed", "error: card declined")

	res = trellisCmd(t, "runs", "history", s.okRun, "--json", "--store", s.url).ok(t)
	h, err := trellis.ParseHistory([]byte(res.stdout))
	if err != nil {
		t.Fatalf("%v\n%s", err, res.stdout)
	}
	if h.Run.ID != s.okRun || h.Run.Status != trellis.StatusSucceeded || string(h.Run.Output) != "42" || len(h.Ops) != 1 {
		t.Fatalf("json history run %+v\n%s", h.Run, res.stdout)
	}
	if op := h.Ops[0]; op.Name != "flaky" || string(op.Result) != "42" || len(op.AttemptLog) != 1 || op.Attempts != 2 {
		t.Errorf("json history op %+v", op)
	}
	contains(t, "json history", res.stdout, `"format": "trellis.history/v1"`, `"result": 42`)
	trellistest.Replay(t, h, s.workflows...) // what the CLI exports replays
	res = trellisCmd(t, "runs", "history", s.failedRun, "--json", "--store", s.url).ok(t)
	h, err = trellis.ParseHistory([]byte(res.stdout))
	if err != nil {
		t.Fatal(err)
	}
	trellistest.Replay(t, h, s.workflows...)
	res = trellisCmd(t, "runs", "get", s.failedRun, "--json", "--store", s.url).ok(t)
	var run struct {
		ID     string          `json:"id"`
		Status trellis.Status  `json:"status"`
		Input  json.RawMessage `json:"input"` // JSON payloads are shown as JSON
		Error  *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
	err = json.Unmarshal([]byte(res.stdout), &run)
	if err != nil || run.ID != s.failedRun || run.Status != trellis.StatusFailed || string(run.Input) != "21" ||
		run.Error == nil || !strings.HasSuffix(run.Error.Message, ": card declined") {
		t.Errorf("json run %v\n%s", err, res.stdout)
	}
}

func TestRunsErrors(t *testing.T) {
	t.Parallel()
	s := seed(t)
	for _, sub := range []string{"get", "history", "cancel", "resume"} {
		res := trellisCmd(t, "runs", sub, "nope", "--store", s.url)
		if res.code != exitNotFound || res.stderr != "trellis: run \"nope\": run not found\n" {
			t.Errorf("%s of unknown run: exit %d %q", sub, res.code, res.stderr)
		}
	}
	res := trellisCmd(t, "runs", "cancel", s.okRun, "--store", s.url)
	if res.code != exitConflict || !strings.Contains(res.stderr, "run already finished") {
		t.Errorf("cancel of finished run: exit %d %q", res.code, res.stderr)
	}
	res = trellisCmd(t, "runs", "resume", s.failedRun, "--store", s.url)
	if res.code != exitConflict || !strings.Contains(res.stderr, "run already finished") {
		t.Errorf("resume of finished run: exit %d %q", res.code, res.stderr)
	}
	usage := [][]string{
		{"runs", "get", "--store", s.url},
		{"runs", "get", "a", "b", "--store", s.url},
		{"runs", "get", "a"},
		{"runs", "list", "--bogus", "--store", s.url},
		{"runs", "list", "--limit", "-1", "--store", s.url},
		{"runs", "frob"},
		{"runs"},
	}
	for _, args := range usage {
		if res := trellisCmd(t, args...); res.code != exitUsage || strings.Count(res.stderr, "\n") != 2 ||
			!strings.Contains(res.stderr, "\nrun 'trellis runs") || !strings.HasSuffix(res.stderr, " -h' for usage\n") {
			t.Errorf("%q: exit %d\n%s", args, res.code, res.stderr)
		}
	}
	res = trellisCmd(t, "runs", "list", "--store", "sqlite:///nonexistent/dir/t.db")
	if res.code != exitNotFound || !strings.Contains(res.stderr, "no store at /nonexistent/dir/t.db") {
		t.Errorf("missing store: exit %d %q", res.code, res.stderr)
	}
}

func TestRunsCancel(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	wf := trellis.NewWorkflow("never-runs", func(wc *trellis.Context, n int) (int, error) { return n, nil })
	c := openClient(t, url, true, wf) // no worker: the run stays pending
	h, err := trellis.Start(ctxT(t), c, wf, 1, trellis.StartOptions{ID: "order-7"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	res := trellisCmd(t, "runs", "cancel", "order-7", "--store", url).ok(t)
	if res.stdout != "run "+h.RunID()+" cancelled\n" {
		t.Errorf("cancel printed %q", res.stdout)
	}
	res = trellisCmd(t, "runs", "list", "--status", "cancelled", "--store", url).ok(t)
	contains(t, "cancelled runs", res.stdout, h.RunID(), "cancelled")
	res = trellisCmd(t, "runs", "resume", "order-7", "--store", url)
	if res.code != exitConflict || !strings.Contains(res.stderr, `run "order-7": run already finished`) {
		t.Errorf("resume of cancelled run: exit %d %q", res.code, res.stderr)
	}
}

func TestRunsDelete(t *testing.T) {
	t.Parallel()
	s := seed(t)
	res := trellisCmd(t, "runs", "delete", s.okRun, "--store", s.url).ok(t)
	if res.stdout != "run "+s.okRun+" deleted\n" {
		t.Errorf("delete printed %q", res.stdout)
	}
	res = trellisCmd(t, "runs", "get", s.okRun, "--store", s.url)
	if res.code != exitNotFound || !strings.Contains(res.stderr, "run not found") {
		t.Errorf("get after delete: exit %d %q", res.code, res.stderr)
	}
	res = trellisCmd(t, "runs", "delete", s.okRun, "--store", s.url)
	if res.code != exitNotFound || res.stderr != "trellis: run \""+s.okRun+"\": run not found\n" {
		t.Errorf("second delete: exit %d %q", res.code, res.stderr)
	}
	url := storeURL(t)
	wf := trellis.NewWorkflow("never-runs", func(wc *trellis.Context, n int) (int, error) { return n, nil })
	c := openClient(t, url, true, wf) // no worker: the run stays pending
	if _, err := trellis.Start(ctxT(t), c, wf, 1, trellis.StartOptions{ID: "order-8"}); err != nil {
		t.Fatal(err)
	}
	res = trellisCmd(t, "runs", "delete", "order-8", "--store", url)
	if res.code != exitConflict || !strings.Contains(res.stderr, `run "order-8" is pending: run is still active; cancel it first`) {
		t.Errorf("delete of a pending run: exit %d %q", res.code, res.stderr)
	}
	trellisCmd(t, "runs", "get", "order-8", "--store", url).ok(t)
}

// A run without ops says whether more may come: a finished one (a job whose
// first attempt succeeded records none) has none to come.
func TestPrintHistoryWithoutOps(t *testing.T) {
	for status, want := range map[trellis.Status]string{
		trellis.StatusSucceeded: "no ops recorded (a job whose first attempt succeeded records none)\n",
		trellis.StatusPending:   "no ops recorded yet\n",
	} {
		var b strings.Builder
		if err := printHistory(&b, &trellis.Run{ID: "r", WorkflowID: "r", Workflow: "double", Status: status}, nil); err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(b.String(), "\n\n"+want) {
			t.Errorf("%s run without ops: %q, want it to end with %q", status, b.String(), want)
		}
	}
}
