package main

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

func TestSchedulesCommands(t *testing.T) {
	t.Parallel()
	url := storeURL(t)
	wf := trellis.NewWorkflow("report", func(wc *trellis.Context, n int) (int, error) { return n, nil })
	c := openClient(t, url, false, wf)
	startAndWait(t, c, wf, "r-1") // the worker records itself: "report" is known

	res := trellisCmd(t, "schedules", "create", "nightly", "--workflow", "report", "--cron", "0 2 * * *",
		"--tz", "Europe/Berlin", "--input", "7", "--overlap", "buffer_one", "--catchup-window", "10m", "--paused", "--store", url).ok(t)
	contains(t, "schedules create", res.stdout, "nightly", "report", "0 2 * * * (Europe/Berlin)", "buffer_one", "10m0s", "Paused:", "true")
	res = trellisCmd(t, "schedules", "list", "--store", url).ok(t)
	contains(t, "schedules list", res.stdout, "NAME", "nightly", "report", "Europe/Berlin", "true")

	// Bad input: a clear error, and the schedule unchanged.
	for _, c := range []struct {
		args []string
		want string
		code int
	}{
		{[]string{"create", "x", "--workflow", "report", "--cron", "0 25 * * *"}, "cron expression", exitUsage},
		{[]string{"create", "x", "--workflow", "report", "--cron", "@daily", "--tz", "Moon/Base"}, "unknown time zone", exitUsage},
		{[]string{"create", "nightly", "--workflow", "report", "--cron", "@daily"}, "already exists", exitConflict},
		{[]string{"pause", "nightly"}, "already paused", exitConflict},
		{[]string{"update", "nightly", "--cron", "every night"}, "cron expression", exitUsage},
		{[]string{"get", "missing"}, "schedule not found", exitNotFound},
	} {
		res := trellisCmd(t, append(append([]string{"schedules"}, c.args...), "--store", url)...)
		if res.code != c.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.args, res.code, c.code, res.stderr)
		}
		contains(t, "schedules "+c.args[0], res.stderr, c.want)
	}
	var sc trellis.Schedule
	res = trellisCmd(t, "schedules", "get", "nightly", "--json", "--store", url).ok(t)
	if err := json.Unmarshal([]byte(res.stdout), &sc); err != nil {
		t.Fatal(err)
	}
	if sc.Spec.Cron != "0 2 * * *" || !sc.Paused || string(sc.Spec.Input) != "7" || sc.Spec.CatchupWindow != 10*time.Minute {
		t.Fatalf("refused commands changed the schedule: %+v", sc)
	}

	res = trellisCmd(t, "schedules", "update", "nightly", "--cron", "30 3 * * *", "--store", url).ok(t)
	contains(t, "schedules update", res.stdout, "30 3 * * * (Europe/Berlin)", "buffer_one") // other fields kept
	trellisCmd(t, "schedules", "resume", "nightly", "--store", url).ok(t)
	res = trellisCmd(t, "schedules", "trigger", "nightly", "--json", "--store", url).ok(t)
	var run trellis.Run
	if err := json.Unmarshal([]byte(res.stdout), &run); err != nil || run.Workflow != "report" {
		t.Fatalf("trigger: %+v, %v", run, err)
	}
	// With no live worker, the run a trigger starts says why it waits: the
	// command reads it back, as runs start does.
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	res = trellisCmd(t, "schedules", "trigger", "nightly", "--store", url).ok(t)
	contains(t, "trigger without a worker", res.stdout, `no live worker serves workflow "report"`)
	res = trellisCmd(t, "schedules", "backfill", "nightly", "--start", "2026-03-28T00:00:00Z", "--end", "2026-03-31T00:00:00Z", "--store", url).ok(t)
	// 03:30 Berlin on the 28th (CET), 29th and 30th (CEST): the spring change is no gap at 03:30.
	contains(t, "schedules backfill", res.stdout, "3 runs", "sched-nightly-20260328T023000Z", "sched-nightly-20260329T013000Z", "sched-nightly-20260330T013000Z")
	res = trellisCmd(t, "schedules", "delete", "nightly", "--store", url).ok(t)
	contains(t, "schedules delete", res.stdout, "deleted schedule nightly")
	res = trellisCmd(t, "schedules", "list", "--store", url).ok(t)
	contains(t, "schedules list after delete", res.stdout, "no schedules")
}

func TestSchedulesUsage(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"schedules"},
		{"schedules", "frob"},
		{"schedules", "create", "x", "--store", "sqlite:///x.db"},
		{"schedules", "create", "--workflow", "w", "--cron", "@daily", "--store", "sqlite:///x.db"},
		{"schedules", "create", "x", "--workflow", "w", "--cron", "@daily", "--input", "{", "--store", "sqlite:///x.db"},
		{"schedules", "get", "--store", "sqlite:///x.db"},
		{"schedules", "backfill", "x", "--start", "yesterday", "--end", "2026-01-01T00:00:00Z", "--store", "sqlite:///x.db"},
	} {
		if res := trellisCmd(t, args...); res.code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", args, res.code, res.stderr)
		}
	}
	res := trellisCmd(t, "help").ok(t)
	contains(t, "help", res.stdout, "schedules")
}
