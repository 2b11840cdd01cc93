package server

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store"
)

const schedules = "/v1/namespaces/default/schedules"

// The schedule routes end to end: a per-second schedule fires runs that the
// worker runs; pause, resume, trigger, backfill and delete answer as documented.
func TestSchedulesAPI(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			testSchedulesAPI(t, newEnv(t, url(t), fastScheduler))
		})
	}
}

func fastScheduler(c *Config) {
	c.Scheduler = SchedulerConfig{LeaseDuration: 2 * time.Second, Interval: 100 * time.Millisecond}
}

// served waits until a worker record of the namespace lists workflow: a
// schedule's workflow must be known.
func (e *env) served(workflow string) {
	e.t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ws, err := e.st.WorkerList(context.Background(), &store.WorkerListParams{Namespace: "default"})
		if err != nil {
			e.t.Fatal(err)
		}
		if slices.ContainsFunc(ws, func(w *store.Worker) bool { return slices.Contains(w.Workflows, workflow) }) {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("no worker record lists %s", workflow)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func testSchedulesAPI(t *testing.T, e *env) {
	e.served("echo")
	var sc trellis.Schedule
	e.do("POST", schedules, "admin", map[string]any{"name": "tick", "spec": map[string]any{
		"workflow": "echo", "input": map[string]any{"n": 1}, "cron": "@every 1s",
		"time_zone": "Europe/Berlin", "overlap": "allow_all", "catchup_window": "30s"}}).want(t, 201).decode(t, &sc)
	if sc.Name != "tick" || sc.Spec.Queue != "default" || sc.Spec.CatchupWindow != 30*time.Second || sc.Paused || sc.NextFireAt == nil {
		t.Fatalf("created %+v", sc)
	}
	// It fires: runs of echo with the schedule's input succeed.
	deadline := time.Now().Add(15 * time.Second)
	for {
		var got trellis.Schedule
		e.do("GET", schedules+"/tick", "reader", nil).want(t, 200).decode(t, &got)
		if got.LastRunID != "" {
			if run := e.waitRun(got.LastRunID); run.Status != trellis.StatusSucceeded || string(run.Output) != `{"n":1}` {
				t.Fatalf("scheduled run %+v", run)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the schedule never fired")
		}
		time.Sleep(100 * time.Millisecond)
	}
	var paused trellis.Schedule
	e.do("POST", schedules+"/tick/pause", "admin", nil).want(t, 200).decode(t, &paused)
	if !paused.Paused {
		t.Fatalf("pause: %+v", paused)
	}
	e.do("POST", schedules+"/tick/pause", "admin", nil).problem(t, 409, "schedule_paused")
	var again trellis.Schedule
	e.do("GET", schedules+"/tick", "reader", nil).want(t, 200).decode(t, &again)
	if !again.UpdatedAt.Equal(paused.UpdatedAt) {
		t.Fatal("pausing a paused schedule changed it")
	}
	// Paused: no new runs.
	n := e.runCount()
	time.Sleep(1500 * time.Millisecond)
	if m := e.runCount(); m != n {
		t.Fatalf("a paused schedule started %d runs", m-n)
	}
	var run trellis.Run
	e.do("POST", schedules+"/tick/trigger", "producer", nil).want(t, 201).decode(t, &run)
	if run.Workflow != "echo" || e.waitRun(run.ID).Status != trellis.StatusSucceeded {
		t.Fatalf("triggered run %+v", run)
	}
	var bf trellis.BackfillResult
	body := map[string]any{"start": "2026-01-01T00:00:00Z", "end": "2026-01-01T00:00:05Z"}
	e.do("POST", schedules+"/tick/backfill", "admin", body).want(t, 200).decode(t, &bf)
	if len(bf.Runs) != 5 {
		t.Fatalf("backfill started %d runs, want 5", len(bf.Runs))
	}
	var bf2 trellis.BackfillResult
	e.do("POST", schedules+"/tick/backfill", "admin", body).want(t, 200).decode(t, &bf2)
	for i := range bf.Runs {
		if bf2.Runs[i].ID != bf.Runs[i].ID {
			t.Fatalf("a repeated backfill started other runs: %s vs %s", bf2.Runs[i].ID, bf.Runs[i].ID)
		}
	}
	e.do("POST", schedules+"/tick/resume", "admin", nil).want(t, 200)
	e.do("POST", schedules+"/tick/resume", "admin", nil).problem(t, 409, "schedule_not_paused")
	var updated trellis.Schedule
	e.do("PUT", schedules+"/tick", "admin", map[string]any{"workflow": "echo", "cron": "0 2 * * *",
		"time_zone": "Europe/Berlin"}).want(t, 200).decode(t, &updated)
	if updated.Spec.Cron != "0 2 * * *" || updated.Spec.Overlap != trellis.OverlapSkip || updated.Spec.CatchupWindow != trellis.DefaultCatchupWindow {
		t.Fatalf("updated %+v", updated)
	}
	var list ScheduleList
	e.do("GET", schedules, "reader", nil).want(t, 200).decode(t, &list)
	if len(list.Schedules) != 1 || list.Schedules[0].Name != "tick" {
		t.Fatalf("list %+v", list)
	}
	e.do("DELETE", schedules+"/tick", "admin", nil).want(t, 204)
	e.do("GET", schedules+"/tick", "reader", nil).problem(t, 404, "schedule_not_found")
	e.do("DELETE", schedules+"/tick", "admin", nil).problem(t, 404, "schedule_not_found")
}

// Bad input to the schedule routes gets its error and changes nothing.
func TestScheduleBadInput(t *testing.T) {
	for name, url := range storeURLs(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, url(t), func(c *Config) { c.Scheduler.Disabled = true })
			e.served("echo")
			spec := map[string]any{"workflow": "echo", "cron": "0 2 * * *", "time_zone": "Europe/Berlin"}
			e.do("POST", schedules, "admin", map[string]any{"name": "nightly", "spec": spec}).want(t, 201)
			var before trellis.Schedule
			e.do("GET", schedules+"/nightly", "reader", nil).want(t, 200).decode(t, &before)
			with := func(k string, v any) map[string]any {
				s := map[string]any{}
				for k, v := range spec {
					s[k] = v
				}
				s[k] = v
				return s
			}
			runs := e.runCount()
			for _, c := range []struct {
				name, method, path, token string
				body                      any
				status                    int
				code                      string
			}{
				{"invalid cron", "POST", schedules, "admin", map[string]any{"name": "x", "spec": with("cron", "61 * * * *")}, 400, "invalid_argument"},
				{"cron of 3 fields", "POST", schedules, "admin", map[string]any{"name": "x", "spec": with("cron", "* * *")}, 400, "invalid_argument"},
				{"sub-second interval", "POST", schedules, "admin", map[string]any{"name": "x", "spec": with("cron", "@every 10ms")}, 400, "invalid_argument"},
				{"invalid time zone", "POST", schedules, "admin", map[string]any{"name": "x", "spec": with("time_zone", "Mars/Olympus")}, 400, "invalid_argument"},
				{"unknown overlap", "POST", schedules, "admin", map[string]any{"name": "x", "spec": with("overlap", "sometimes")}, 400, "invalid_argument"},
				{"negative window", "POST", schedules, "admin", map[string]any{"name": "x", "spec": with("catchup_window", "-1m")}, 400, "invalid_argument"},
				{"malformed window", "POST", schedules, "admin", map[string]any{"name": "x", "spec": with("catchup_window", "soon")}, 400, "invalid_argument"},
				{"unknown spec field", "POST", schedules, "admin", map[string]any{"name": "x", "spec": with("crontab", "x")}, 400, "invalid_argument"},
				{"name with a space", "POST", schedules, "admin", map[string]any{"name": "a b", "spec": spec}, 400, "invalid_argument"},
				{"no name", "POST", schedules, "admin", map[string]any{"spec": spec}, 400, "invalid_argument"},
				{"taken name", "POST", schedules, "admin", map[string]any{"name": "nightly", "spec": with("cron", "@hourly")}, 409, "schedule_exists"},
				{"producer creates", "POST", schedules, "producer", map[string]any{"name": "x", "spec": spec}, 403, "permission_denied"},
				{"system namespace", "POST", "/v1/namespaces/__system__/schedules", "admin", map[string]any{"name": "x", "spec": spec}, 403, "permission_denied"},
				{"update with invalid cron", "PUT", schedules + "/nightly", "admin", with("cron", "every day"), 400, "invalid_argument"},
				{"update with invalid zone", "PUT", schedules + "/nightly", "admin", with("time_zone", "Local"), 400, "invalid_argument"},
				{"update unknown", "PUT", schedules + "/zz", "admin", spec, 404, "schedule_not_found"},
				{"resume an active schedule", "POST", schedules + "/nightly/resume", "admin", nil, 409, "schedule_not_paused"},
				{"pause unknown", "POST", schedules + "/zz/pause", "admin", nil, 404, "schedule_not_found"},
				{"trigger unknown", "POST", schedules + "/zz/trigger", "producer", nil, 404, "schedule_not_found"},
				{"reader triggers", "POST", schedules + "/nightly/trigger", "reader", nil, 403, "permission_denied"},
				{"backfill backwards", "POST", schedules + "/nightly/backfill", "admin", map[string]any{"start": "2026-01-02T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, 400, "invalid_argument"},
				{"backfill too long", "POST", schedules + "/nightly/backfill", "admin", map[string]any{"start": "2020-01-01T00:00:00Z", "end": "2026-01-01T00:00:00Z"}, 400, "invalid_argument"},
				{"backfill without end", "POST", schedules + "/nightly/backfill", "admin", map[string]any{"start": "2020-01-01T00:00:00Z"}, 400, "invalid_argument"},
			} {
				e.do(c.method, c.path, c.token, c.body).problem(t, c.status, c.code)
				_ = c.name
			}
			// Pausing a paused schedule: the error, and nothing changed.
			e.do("POST", schedules+"/nightly/pause", "admin", nil).want(t, 200)
			var paused trellis.Schedule
			e.do("GET", schedules+"/nightly", "reader", nil).want(t, 200).decode(t, &paused)
			e.do("POST", schedules+"/nightly/pause", "admin", nil).problem(t, 409, "schedule_paused")
			var after trellis.Schedule
			e.do("GET", schedules+"/nightly", "reader", nil).want(t, 200).decode(t, &after)
			if after.Spec.Cron != before.Spec.Cron || after.Spec.TimeZone != before.Spec.TimeZone ||
				!after.UpdatedAt.Equal(paused.UpdatedAt) || !after.LastFireAt.Equal(paused.LastFireAt) {
				t.Fatalf("refused requests changed the schedule: %+v, was %+v", after, paused)
			}
			var list ScheduleList
			e.do("GET", schedules, "reader", nil).want(t, 200).decode(t, &list)
			if len(list.Schedules) != 1 {
				t.Fatalf("refused requests left %d schedules", len(list.Schedules))
			}
			if n := e.runCount(); n != runs {
				t.Fatalf("refused requests started %d runs", n-runs)
			}
		})
	}
}

// The Go client on a server gets the same records and errors as on a store.
func TestSchedulesRemoteClient(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.Scheduler.Disabled = true })
	e.served("echo")
	ctx := context.Background()
	c, err := trellis.Open(ctx, trellis.Config{Server: e.base, Token: "admin"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	sc, err := c.CreateSchedule(ctx, "r", trellis.ScheduleSpec{Workflow: "echo", Cron: "*/5 * * * *", Overlap: trellis.OverlapBufferOne},
		trellis.CreateScheduleOptions{Paused: true})
	if err != nil || !sc.Paused || sc.Spec.Overlap != trellis.OverlapBufferOne || sc.Spec.TimeZone != "UTC" {
		t.Fatalf("create: %+v, %v", sc, err)
	}
	if _, err := c.CreateSchedule(ctx, "r", trellis.ScheduleSpec{Workflow: "echo", Cron: "@hourly"}); !errors.Is(err, trellis.ErrScheduleExists) {
		t.Fatalf("duplicate: %v", err)
	}
	// A workflow no worker serves yet is taken: its runs wait for one.
	if sc, err := c.CreateSchedule(ctx, "x", trellis.ScheduleSpec{Workflow: "nope", Cron: "@hourly"}); err != nil || sc.Spec.Workflow != "nope" {
		t.Fatalf("schedule of a workflow no worker serves: %+v, %v", sc, err)
	}
	if err := c.DeleteSchedule(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.PauseSchedule(ctx, "r"); !errors.Is(err, trellis.ErrSchedulePaused) {
		t.Fatalf("pause paused: %v", err)
	}
	if _, err := c.ResumeSchedule(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	runs, err := c.BackfillSchedule(ctx, "r", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 0, 30, 0, 0, time.UTC))
	if err != nil || len(runs) != 6 {
		t.Fatalf("backfill: %d runs, %v", len(runs), err)
	}
	run, err := c.TriggerSchedule(ctx, "r")
	if err != nil || run.Workflow != "echo" {
		t.Fatalf("trigger: %+v, %v", run, err)
	}
	list, err := c.ListSchedules(ctx)
	if err != nil || len(list) != 1 || list[0].LastRunID != run.ID {
		t.Fatalf("list: %+v, %v", list, err)
	}
	if _, err := c.UpdateSchedule(ctx, "r", trellis.ScheduleSpec{Workflow: "echo", Cron: "@daily", TimeZone: "Nowhere/City"}); !errors.Is(err, trellis.ErrInvalidParams) {
		t.Fatalf("update with a bad zone: %v", err)
	}
	if err := c.DeleteSchedule(ctx, "r"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSchedule(ctx, "r"); !errors.Is(err, trellis.ErrScheduleNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
	ids := []string{}
	for _, r := range runs {
		ids = append(ids, r.ID)
	}
	if !slices.IsSorted(ids) {
		t.Fatalf("backfilled runs out of tick order: %v", ids)
	}
}

// A schedule POST with an Idempotency-Key answers its first response again and
// changes nothing the second time.
func TestScheduleIdempotencyKey(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) { c.Scheduler.Disabled = true })
	e.served("echo")
	body := map[string]any{"name": "k", "spec": map[string]any{"workflow": "echo", "cron": "@hourly"}}
	first := e.do("POST", schedules, "admin", body, "Idempotency-Key", "create-k").want(t, 201)
	again := e.do("POST", schedules, "admin", body, "Idempotency-Key", "create-k").want(t, 201)
	if again.header.Get(IdempotentReplayedHeader) != "true" || string(again.body) != string(first.body) {
		t.Fatalf("replay: %s %q vs %q", again.header, again.body, first.body)
	}
	e.do("POST", schedules+"/k/trigger", "producer", nil, "Idempotency-Key", "trig").want(t, 201)
	e.do("POST", schedules+"/k/trigger", "producer", nil, "Idempotency-Key", "trig").want(t, 201)
	if n := e.runCount(); n != 1 {
		t.Fatalf("two triggers with one key started %d runs", n)
	}
	e.do("POST", schedules+"/k/pause", "admin", nil, "Idempotency-Key", "p").want(t, 200)
	e.do("POST", schedules+"/k/pause", "admin", nil, "Idempotency-Key", "p").want(t, 200) // replayed, not 409
	e.do("POST", schedules+"/k/pause", "admin", nil).problem(t, 409, "schedule_paused")
}
