package trellis_test

import (
	"errors"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/clock"
)

// waitRunEnded waits until a run with this ID exists and has ended, moving the
// fake clock on by 100ms a step (the scheduler's loop and the worker wait on it).
func waitRunEnded(t *testing.T, c *trellis.Client, clk *clock.Fake, id string) *trellis.Run {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		run, err := c.Get(ctxT(t), id)
		if err == nil && run.Status.Terminal() {
			return run
		}
		if err != nil && !errors.Is(err, trellis.ErrRunNotFound) {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s did not end (%v, %v)", id, run, err)
		}
		time.Sleep(10 * time.Millisecond)
		clk.Advance(100 * time.Millisecond)
	}
}

// The scheduler embedded with the worker fires a schedule in Europe/Berlin on
// the fake clock, across the spring daylight-saving change, and the worker runs
// the runs; trigger and backfill start runs by hand.
func TestScheduleEmbedded(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 3, 27, 12, 0, 0, 0, time.UTC))
	wf := trellis.NewWorkflow("double", func(wc *trellis.Context, n int) (int, error) { return 2 * n, nil })
	c := open(t, storeURL(t), func(cfg *trellis.Config) { cfg.Clock = clk })
	register(t, c, wf)
	ctx := ctxT(t)
	sc, err := c.CreateSchedule(ctx, "nightly", trellis.ScheduleSpec{Workflow: "double", Input: trellis.Payload("21"),
		Cron: "30 2 * * *", TimeZone: "Europe/Berlin", Overlap: trellis.OverlapAllowAll, CatchupWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Date(2026, 3, 28, 1, 30, 0, 0, time.UTC); sc.NextFireAt == nil || !sc.NextFireAt.Equal(want) {
		t.Fatalf("next fire %v, want %v (02:30 CET)", sc.NextFireAt, want)
	}
	clk.Set(time.Date(2026, 3, 28, 1, 30, 0, 0, time.UTC))
	run := waitRunEnded(t, c, clk, "sched-nightly-20260328T013000Z")
	if run.Status != trellis.StatusSucceeded || string(run.Output) != "42" {
		t.Fatalf("run %+v", run)
	}
	// 2026-03-29 has no 02:30 in Berlin: the tick fires once, at 03:00 CEST.
	clk.Set(time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC))
	waitRunEnded(t, c, clk, "sched-nightly-20260329T010000Z")
	sc, err = c.GetSchedule(ctx, "nightly")
	if err != nil || sc.LastRunID != "sched-nightly-20260329T010000Z" {
		t.Fatalf("schedule %+v, %v", sc, err)
	}

	trig, err := c.TriggerSchedule(ctx, "nightly")
	if err != nil {
		t.Fatal(err)
	}
	if r := waitRunEnded(t, c, clk, trig.ID); string(r.Output) != "42" {
		t.Fatalf("triggered run %+v", r)
	}
	// Backfill: the ticks of 20-22 March; the 28th's tick (fired) comes back as is.
	runs, err := c.BackfillSchedule(ctx, "nightly", time.Date(2026, 3, 20, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 23, 0, 0, 0, 0, time.UTC))
	if err != nil || len(runs) != 3 || runs[0].ID != "sched-nightly-20260320T013000Z" {
		t.Fatalf("backfill: %v, %v", runs, err)
	}
	again, err := c.BackfillSchedule(ctx, "nightly", time.Date(2026, 3, 28, 0, 0, 0, 0, time.UTC), time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC))
	if err != nil || len(again) != 1 || again[0].ID != run.ID || again[0].Status != trellis.StatusSucceeded {
		t.Fatalf("backfill of a fired tick: %v, %v", again, err)
	}
}

// Bad input to the schedule methods: a clear error, and nothing created or changed.
func TestScheduleBadInputChangesNothing(t *testing.T) {
	t.Parallel()
	wf := trellis.NewWorkflow("known", func(wc *trellis.Context, n int) (int, error) { return n, nil })
	c := open(t, storeURL(t), func(cfg *trellis.Config) { cfg.Scheduler.Disabled = true })
	register(t, c, wf)
	ctx := ctxT(t)
	good := trellis.ScheduleSpec{Workflow: "known", Cron: "0 2 * * *", TimeZone: "Europe/Berlin", Input: trellis.Payload("1")}
	if _, err := c.CreateSchedule(ctx, "s", good); err != nil {
		t.Fatal(err)
	}
	before, _ := c.GetSchedule(ctx, "s")
	with := func(f func(*trellis.ScheduleSpec)) trellis.ScheduleSpec { s := good; f(&s); return s }
	for _, tc := range []struct {
		name string
		spec trellis.ScheduleSpec
		want error
	}{
		{"invalid cron", with(func(s *trellis.ScheduleSpec) { s.Cron = "0 2 * *" }), trellis.ErrInvalidParams},
		{"cron with a zone prefix", with(func(s *trellis.ScheduleSpec) { s.Cron = "CRON_TZ=UTC 0 2 * * *" }), trellis.ErrInvalidParams},
		{"invalid time zone", with(func(s *trellis.ScheduleSpec) { s.TimeZone = "Europe/Atlantis" }), trellis.ErrInvalidParams},
		{"input of the wrong type", with(func(s *trellis.ScheduleSpec) { s.Input = trellis.Payload(`"x"`) }), trellis.ErrInvalidInput},
		{"unknown overlap", with(func(s *trellis.ScheduleSpec) { s.Overlap = "queue" }), trellis.ErrInvalidParams},
		{"negative window", with(func(s *trellis.ScheduleSpec) { s.CatchupWindow = -time.Minute }), trellis.ErrInvalidParams},
	} {
		if _, err := c.CreateSchedule(ctx, "x", tc.spec); !errors.Is(err, tc.want) {
			t.Errorf("create, %s: %v, want %v", tc.name, err, tc.want)
		}
		if _, err := c.UpdateSchedule(ctx, "s", tc.spec); !errors.Is(err, tc.want) {
			t.Errorf("update, %s: %v, want %v", tc.name, err, tc.want)
		}
	}
	for _, name := range []string{"", "a b", "a/b", string(make([]byte, 101))} {
		if _, err := c.CreateSchedule(ctx, name, good); !errors.Is(err, trellis.ErrInvalidParams) {
			t.Errorf("name %q: %v", name, err)
		}
	}
	if _, err := c.CreateSchedule(ctx, "s", good); !errors.Is(err, trellis.ErrScheduleExists) {
		t.Errorf("taken name: %v", err)
	}
	if _, err := c.ResumeSchedule(ctx, "s"); !errors.Is(err, trellis.ErrScheduleNotPaused) {
		t.Errorf("resume active: %v", err)
	}
	if _, err := c.PauseSchedule(ctx, "s"); err != nil {
		t.Fatal(err)
	}
	paused, _ := c.GetSchedule(ctx, "s")
	if _, err := c.PauseSchedule(ctx, "s"); !errors.Is(err, trellis.ErrSchedulePaused) {
		t.Errorf("pause paused: %v", err)
	}
	if _, err := c.BackfillSchedule(ctx, "s", time.Now(), time.Now().Add(-time.Hour)); !errors.Is(err, trellis.ErrInvalidParams) {
		t.Errorf("backfill backwards: %v", err)
	}
	if _, err := c.BackfillSchedule(ctx, "s", time.Now().AddDate(-5, 0, 0), time.Now()); !errors.Is(err, trellis.ErrInvalidParams) {
		t.Errorf("backfill of more than %d ticks: %v", trellis.MaxBackfillRuns, err)
	}
	for _, f := range []func() error{
		func() error { _, err := c.TriggerSchedule(ctx, "nope"); return err },
		func() error { _, err := c.PauseSchedule(ctx, "nope"); return err },
		func() error { return c.DeleteSchedule(ctx, "nope") },
		func() error { _, err := c.UpdateSchedule(ctx, "nope", good); return err },
	} {
		if err := f(); !errors.Is(err, trellis.ErrScheduleNotFound) {
			t.Errorf("unknown schedule: %v", err)
		}
	}
	after, _ := c.GetSchedule(ctx, "s")
	list, _ := c.ListSchedules(ctx)
	page, _ := c.List(ctx, trellis.ListOptions{})
	if len(list) != 1 || after.Spec.Cron != before.Spec.Cron || !after.UpdatedAt.Equal(paused.UpdatedAt) || len(page.Runs) != 0 {
		t.Fatalf("refused calls changed something: %d schedules, %+v, %d runs", len(list), after, len(page.Runs))
	}
}

// A schedule of a workflow that no worker serves yet is created (as a start
// by name is): its runs wait, pending, with the unserved wait reason, until a
// worker serves the workflow. Every run a schedule starts (fired, triggered,
// backfilled; not one found existing) counts in trellis_runs_started_total.
func TestScheduleBeforeWorkers(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Date(2026, 5, 4, 12, 0, 0, 0, time.UTC))
	url := storeURL(t)
	m := trellis.NewMetrics()
	c := open(t, url, func(cfg *trellis.Config) { cfg.Clock, cfg.Metrics = clk, m })
	register(t, c, trellis.NewWorkflow("other", func(*trellis.Context, int) (int, error) { return 0, nil }))
	ctx := ctxT(t)
	if _, err := c.CreateSchedule(ctx, "early", trellis.ScheduleSpec{Workflow: "later", Input: trellis.Payload("4"),
		Cron: "0 13 * * *", Overlap: trellis.OverlapAllowAll}); err != nil {
		t.Fatalf("schedule of a workflow no worker serves: %v", err)
	}
	started := func() float64 {
		return metricValue(scrape(t, m), `trellis_runs_started_total{workflow="later"}`)
	}
	clk.Set(time.Date(2026, 5, 4, 13, 0, 0, 0, time.UTC))
	id := "sched-early-20260504T130000Z"
	var run *trellis.Run
	waitFor(t, func() bool {
		clk.Advance(100 * time.Millisecond) // the scheduler's loop waits on it
		r, err := c.Get(ctx, id)
		run = r
		return err == nil
	})
	if want := `no live worker serves workflow "later"`; run.Status != trellis.StatusPending || run.WaitReason != want {
		t.Fatalf("fired run: %s, %q; want pending, %q", run.Status, run.WaitReason, want)
	}
	waitFor(t, func() bool { return started() == 1 })
	trig := must[*trellis.Run](t)(c.TriggerSchedule(ctx, "early"))
	// The 3rd's tick is new, the 4th's was fired: one more start.
	runs := must[[]*trellis.Run](t)(c.BackfillSchedule(ctx, "early", time.Date(2026, 5, 3, 0, 0, 0, 0, time.UTC), time.Date(2026, 5, 5, 0, 0, 0, 0, time.UTC)))
	if len(runs) != 2 || runs[1].ID != id {
		t.Fatalf("backfill: %+v", runs)
	}
	if got := started(); got != 3 {
		t.Fatalf("trellis_runs_started_total of the schedule's workflow = %v, want 3 (fired, triggered, backfilled)", got)
	}

	w := open(t, url, func(cfg *trellis.Config) { cfg.Clock, cfg.Scheduler.Disabled = clk, true })
	register(t, w, trellis.NewWorkflow("later", func(_ *trellis.Context, n int) (int, error) { return n * 10, nil }))
	for _, ref := range []string{id, trig.ID, runs[0].ID} {
		if r := waitRunEnded(t, c, clk, ref); r.Status != trellis.StatusSucceeded || string(r.Output) != "40" {
			t.Fatalf("run %s once served: %s %s", ref, r.Status, r.Output)
		}
	}
}
