package schedule

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/clock"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

const ns = "default"

type fixture struct {
	t   *testing.T
	ctx context.Context
	clk *clock.Fake
	st  store.Store
}

func newFixture(t *testing.T, start time.Time) *fixture {
	clk := clock.NewFake(start)
	st, err := storesqlite.Open(t.Context(), storesqlite.Config{Path: filepath.Join(t.TempDir(), "t.db"), Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return &fixture{t: t, ctx: t.Context(), clk: clk, st: st}
}

func (f *fixture) scheduler(owner string) *Scheduler {
	f.t.Helper()
	s, err := New(Config{Store: f.st, Owner: owner, Clock: f.clk, LeaseDuration: 10 * time.Second, Interval: time.Second})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s
}

func (f *fixture) create(name, cron, zone string, overlap store.Overlap, window time.Duration) {
	f.t.Helper()
	_, err := f.st.ScheduleCreate(f.ctx, &store.ScheduleCreateParams{Namespace: ns, Name: name, Spec: store.ScheduleSpec{
		Workflow: "report", Queue: "default", Cron: cron, TimeZone: zone, Overlap: overlap, CatchupWindow: window}})
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) pass(s *Scheduler) {
	f.t.Helper()
	if err := s.Pass(f.ctx); err != nil {
		f.t.Fatal(err)
	}
}

// runs returns the runs of the namespace, oldest first.
func (f *fixture) runs() []*store.Run {
	f.t.Helper()
	res, err := f.st.RunList(f.ctx, &store.RunListParams{Namespace: ns, Limit: 1000})
	if err != nil {
		f.t.Fatal(err)
	}
	slices.Reverse(res.Runs)
	return res.Runs
}

func (f *fixture) ids() []string {
	var ids []string
	for _, r := range f.runs() {
		ids = append(ids, r.ID)
	}
	return ids
}

func (f *fixture) finish(runID string) {
	f.t.Helper()
	if _, err := f.st.RunCancel(f.ctx, &store.RunCancelParams{Namespace: ns, Ref: runID}); err != nil {
		f.t.Fatal(err)
	}
}

var t0 = time.Date(2026, 1, 5, 10, 0, 0, 0, time.UTC)

func TestTicksFireOnce(t *testing.T) {
	f := newFixture(t, t0)
	f.create("s", "* * * * *", "UTC", store.OverlapAllowAll, time.Hour)
	s := f.scheduler("a")
	f.pass(s)
	if n := len(f.runs()); n != 0 {
		t.Fatalf("%d runs before the first tick", n)
	}
	f.clk.Advance(time.Minute)
	f.pass(s)
	f.pass(s) // a second pass at the same time fires nothing more
	want := []string{RunID("s", t0.Add(time.Minute))}
	if got := f.ids(); !slices.Equal(got, want) {
		t.Fatalf("runs %v, want %v", got, want)
	}
	run := f.runs()[0]
	if run.Workflow != "report" || run.Queue != "default" || string(run.Input) != "null" || run.WorkflowID != run.ID {
		t.Fatalf("run %+v", run)
	}
	f.clk.Advance(2 * time.Minute)
	f.pass(s)
	want = append(want, RunID("s", t0.Add(2*time.Minute)), RunID("s", t0.Add(3*time.Minute)))
	if got := f.ids(); !slices.Equal(got, want) {
		t.Fatalf("runs %v, want %v", got, want)
	}
}

func TestOverlapSkip(t *testing.T) {
	f := newFixture(t, t0)
	f.create("s", "* * * * *", "UTC", store.OverlapSkip, time.Hour)
	s := f.scheduler("a")
	for range 3 {
		f.clk.Advance(time.Minute)
		f.pass(s)
	}
	first := RunID("s", t0.Add(time.Minute))
	if got := f.ids(); !slices.Equal(got, []string{first}) {
		t.Fatalf("runs %v, want only %s (the others skipped while it is active)", got, first)
	}
	f.finish(first)
	f.clk.Advance(time.Minute)
	f.pass(s)
	if got := f.ids(); !slices.Equal(got, []string{first, RunID("s", t0.Add(4*time.Minute))}) {
		t.Fatalf("runs %v after the first ended", got)
	}
}

func TestOverlapBufferOne(t *testing.T) {
	f := newFixture(t, t0)
	f.create("s", "* * * * *", "UTC", store.OverlapBufferOne, time.Hour)
	s := f.scheduler("a")
	for range 3 {
		f.clk.Advance(time.Minute)
		f.pass(s)
	}
	first, second := RunID("s", t0.Add(time.Minute)), RunID("s", t0.Add(2*time.Minute))
	if got := f.ids(); !slices.Equal(got, []string{first}) {
		t.Fatalf("runs %v, want %s", got, first)
	}
	sc, _ := f.st.ScheduleGet(f.ctx, &store.ScheduleGetParams{Namespace: ns, Name: "s"})
	if sc.BufferedAt == nil || !sc.BufferedAt.Equal(t0.Add(2*time.Minute)) {
		t.Fatalf("buffered %v, want the second tick", sc.BufferedAt)
	}
	f.finish(first)
	f.clk.Advance(10 * time.Second)
	f.pass(s)
	if got := f.ids(); !slices.Equal(got, []string{first, second}) {
		t.Fatalf("runs %v, want the buffered tick started once the first ended", got)
	}
	f.pass(s)
	if n := len(f.runs()); n != 2 {
		t.Fatalf("%d runs: the buffered tick fired twice", n)
	}
}

func TestOverlapCancelPrevious(t *testing.T) {
	f := newFixture(t, t0)
	f.create("s", "* * * * *", "UTC", store.OverlapCancelPrevious, time.Hour)
	s := f.scheduler("a")
	for range 2 {
		f.clk.Advance(time.Minute)
		f.pass(s)
	}
	runs := f.runs()
	if len(runs) != 2 || runs[0].Status != store.StatusCancelled || runs[1].Status != store.StatusPending {
		t.Fatalf("runs %v, want the first cancelled and the second pending", runs)
	}
}

func TestCatchupWindow(t *testing.T) {
	f := newFixture(t, t0)
	f.create("s", "* * * * *", "UTC", store.OverlapAllowAll, 2*time.Minute)
	s := f.scheduler("a")
	f.clk.Advance(10 * time.Minute) // downtime: ticks 1..10 are due
	f.pass(s)
	want := []string{RunID("s", t0.Add(8*time.Minute)), RunID("s", t0.Add(9*time.Minute)), RunID("s", t0.Add(10*time.Minute))}
	if got := f.ids(); !slices.Equal(got, want) {
		t.Fatalf("runs %v, want only the ticks inside the 2m window %v", got, want)
	}
}

func TestPausedSchedulesDoNotFire(t *testing.T) {
	f := newFixture(t, t0)
	f.create("s", "* * * * *", "UTC", store.OverlapAllowAll, time.Hour)
	if _, err := f.st.SchedulePause(f.ctx, &store.SchedulePauseParams{Namespace: ns, Name: "s", Paused: true}); err != nil {
		t.Fatal(err)
	}
	s := f.scheduler("a")
	f.clk.Advance(5 * time.Minute)
	f.pass(s)
	if n := len(f.runs()); n != 0 {
		t.Fatalf("a paused schedule started %d runs", n)
	}
	if _, err := f.st.SchedulePause(f.ctx, &store.SchedulePauseParams{Namespace: ns, Name: "s", Paused: false}); err != nil {
		t.Fatal(err)
	}
	f.pass(s)
	if n := len(f.runs()); n != 0 {
		t.Fatalf("resuming caught up %d ticks of the pause", n)
	}
	f.clk.Advance(time.Minute)
	f.pass(s)
	if got := f.ids(); !slices.Equal(got, []string{RunID("s", t0.Add(6*time.Minute))}) {
		t.Fatalf("after resume: %v", got)
	}
}

// fireIDs advances the clock by step until end, passing each time, and returns
// the IDs of the runs started (which name their fire times).
func (f *fixture) fireIDs(s *Scheduler, step time.Duration, end time.Time) []string {
	for f.clk.Now().Before(end) {
		f.clk.Advance(step)
		f.pass(s)
	}
	return f.ids()
}

func tickIDs(name string, ts ...time.Time) []string {
	var out []string
	for _, t := range ts {
		out = append(out, RunID(name, t))
	}
	return out
}

func TestDSTEuropeBerlin(t *testing.T) {
	t.Run("SpringForward", func(t *testing.T) {
		// 2026-03-29: 02:00 CET becomes 03:00 CEST. 02:30 does not exist that day.
		f := newFixture(t, time.Date(2026, 3, 28, 0, 0, 0, 0, time.UTC))
		f.create("s", "30 2 * * *", "Europe/Berlin", store.OverlapAllowAll, time.Hour)
		got := f.fireIDs(f.scheduler("a"), 7*time.Minute, time.Date(2026, 3, 30, 12, 0, 0, 0, time.UTC))
		want := tickIDs("s",
			time.Date(2026, 3, 28, 1, 30, 0, 0, time.UTC), // 02:30 CET
			time.Date(2026, 3, 29, 1, 0, 0, 0, time.UTC),  // at 03:00 CEST, once
			time.Date(2026, 3, 30, 0, 30, 0, 0, time.UTC), // 02:30 CEST
		)
		if !slices.Equal(got, want) {
			t.Fatalf("fired at %v, want %v", got, want)
		}
	})
	t.Run("FallBack", func(t *testing.T) {
		// 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:30 happens twice.
		f := newFixture(t, time.Date(2026, 10, 24, 0, 0, 0, 0, time.UTC))
		f.create("s", "30 2 * * *", "Europe/Berlin", store.OverlapAllowAll, time.Hour)
		got := f.fireIDs(f.scheduler("a"), 7*time.Minute, time.Date(2026, 10, 26, 12, 0, 0, 0, time.UTC))
		want := tickIDs("s",
			time.Date(2026, 10, 24, 0, 30, 0, 0, time.UTC), // 02:30 CEST
			time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC), // 02:30 CEST, not again at 02:30 CET
			time.Date(2026, 10, 26, 1, 30, 0, 0, time.UTC), // 02:30 CET
		)
		if !slices.Equal(got, want) {
			t.Fatalf("fired at %v, want %v", got, want)
		}
	})
}

// A leader that stops (paused, partitioned) past its lease loses it to another
// scheduler, and its late fire is rejected by the store: no tick twice, none lost.
func TestFailoverFenced(t *testing.T) {
	f := newFixture(t, t0)
	f.create("s", "* * * * * *", "UTC", store.OverlapAllowAll, time.Minute) // every second
	a, b := f.scheduler("a"), f.scheduler("b")
	for range 3 {
		f.clk.Advance(time.Second)
		f.pass(a)
		f.pass(b)
	}
	if a.Epoch() != 1 || b.Epoch() != 0 {
		t.Fatalf("epochs a=%d b=%d, want a leader with 1", a.Epoch(), b.Epoch())
	}
	// a stops for 15s (past its 10s lease); b asks every second.
	for range 15 {
		f.clk.Advance(time.Second)
		f.pass(b)
	}
	if b.Epoch() != 2 {
		t.Fatalf("b's epoch %d, want 2 (took over)", b.Epoch())
	}
	// a wakes and fires the tick it had computed before it stopped.
	at := t0.Add(4 * time.Second)
	sc, _ := f.st.ScheduleGet(f.ctx, &store.ScheduleGetParams{Namespace: ns, Name: "s"})
	_, err := f.st.ScheduleFire(f.ctx, &store.ScheduleFireParams{Namespace: ns, Name: "s", Epoch: 1, Cursor: &at,
		Run: RunParams(sc, TriggerRunID("s", at), 0)})
	if !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("the old leader's fire: %v, want ErrNotLeader", err)
	}
	f.pass(a)
	if a.Epoch() != 0 {
		t.Fatalf("a still thinks it leads (epoch %d)", a.Epoch())
	}
	for range 2 {
		f.clk.Advance(time.Second)
		f.pass(a)
		f.pass(b)
	}
	// Every second from 1 to 20 fired exactly once.
	var want []string
	for i := 1; i <= 20; i++ {
		want = append(want, RunID("s", t0.Add(time.Duration(i)*time.Second)))
	}
	if got := f.ids(); !slices.Equal(got, want) {
		t.Fatalf("runs %v\nwant %v", got, want)
	}
}

// The loop runs on the clock and Stop hands the lease over at once.
func TestLoopAndStop(t *testing.T) {
	f := newFixture(t, t0)
	f.create("s", "* * * * * *", "UTC", store.OverlapAllowAll, time.Minute)
	a := f.scheduler("a")
	a.Start()
	deadline := time.Now().Add(10 * time.Second)
	for len(f.runs()) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("the loop fired %d runs", len(f.runs()))
		}
		<-f.clk.TimerAdded()
		f.clk.Advance(time.Second)
	}
	if err := a.Stop(f.ctx); err != nil {
		t.Fatal(err)
	}
	b := f.scheduler("b")
	f.pass(b)
	if b.Epoch() != 2 {
		t.Fatalf("after a's Stop, b's epoch is %d, want 2 at once", b.Epoch())
	}
}

func TestNewChecksConfig(t *testing.T) {
	f := newFixture(t, t0)
	if _, err := New(Config{Store: f.st, Owner: "a", LeaseDuration: time.Second, Interval: 800 * time.Millisecond}); err == nil {
		t.Fatal("an interval over half the lease was accepted")
	}
	if _, err := New(Config{Store: f.st}); err == nil {
		t.Fatal("a scheduler without an owner was accepted")
	}
	s, err := New(Config{Store: f.st, Owner: "a", LeaseDuration: time.Second})
	if err != nil || s.cfg.Interval != 500*time.Millisecond {
		t.Fatalf("default interval with a 1s lease: %v, %v", s.cfg.Interval, err)
	}
	if err := s.Stop(context.Background()); err != nil { // never started: nothing to wait for
		t.Fatal(err)
	}
}

// After downtime longer than the catch-up window, an @every schedule keeps its
// phase: its ticks stay created + k × interval.
func TestCatchupKeepsEveryPhase(t *testing.T) {
	start := t0.Add(30 * time.Second) // ticks at hh:mm:30
	f := newFixture(t, start)
	f.create("s", "@every 1m", "UTC", store.OverlapAllowAll, 2*time.Minute)
	s := f.scheduler("a")
	f.clk.Advance(10*time.Minute + 5*time.Second) // now hh:10:35; window from hh:08:35
	f.pass(s)
	// The ticks in the window [hh:08:35, hh:10:35]: hh:09:30 and hh:10:30.
	want := []string{RunID("s", start.Add(9*time.Minute)), RunID("s", start.Add(10*time.Minute))}
	if got := f.ids(); !slices.Equal(got, want) {
		t.Fatalf("runs %v, want %v", got, want)
	}
}
