package storetest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

var scheduleCases = []testCase{
	{"CreateGetList", scheduleCreateGetList},
	{"CreateExists", scheduleCreateExists},
	{"InvalidParams", scheduleInvalidParams},
	{"UpdateMovesCursor", scheduleUpdateMovesCursor},
	{"PauseResume", schedulePauseResume},
	{"Delete", scheduleDelete},
	{"LeaseAcquireRenewTake", scheduleLeaseAcquireRenewTake},
	{"LeaseRelease", scheduleLeaseRelease},
	{"FireCreatesRunOnce", scheduleFireCreatesRunOnce},
	{"FireFencedByEpoch", scheduleFireFencedByEpoch},
	{"FireCancelPrevious", scheduleFireCancelPrevious},
	{"FireBuffered", scheduleFireBuffered},
	{"FireUnknownSchedule", scheduleFireUnknown},
	{"FirePaused", scheduleFirePaused},
	{"Idempotent", scheduleIdempotent},
}

func scheduleSpec() store.ScheduleSpec {
	return store.ScheduleSpec{Workflow: wf, Queue: queue, Input: []byte(`{"n":1}`), Cron: "*/5 * * * *",
		TimeZone: "Europe/Berlin", Overlap: store.OverlapSkip, CatchupWindow: time.Minute}
}

func (e *env) createSchedule(name string) *store.Schedule {
	e.t.Helper()
	sc, err := e.st.ScheduleCreate(e.ctx, &store.ScheduleCreateParams{Namespace: ns, Name: name, Spec: scheduleSpec()})
	if err != nil {
		e.t.Fatalf("ScheduleCreate(%s): %v", name, err)
	}
	return sc
}

func (e *env) getSchedule(name string) *store.Schedule {
	e.t.Helper()
	sc, err := e.st.ScheduleGet(e.ctx, &store.ScheduleGetParams{Namespace: ns, Name: name})
	if err != nil {
		e.t.Fatalf("ScheduleGet(%s): %v", name, err)
	}
	return sc
}

func (e *env) lease(owner string, epoch int64) *store.SchedulerLease {
	e.t.Helper()
	l, err := e.st.SchedulerLeaseAcquire(e.ctx, &store.SchedulerLeaseParams{Owner: owner, Epoch: epoch, Duration: 10 * time.Second})
	if err != nil {
		e.t.Fatalf("SchedulerLeaseAcquire(%s, %d): %v", owner, epoch, err)
	}
	return l
}

func (e *env) fireRun(name string, at time.Time) *store.RunCreateParams {
	return e.params(withID(name+"@"+at.UTC().Format(time.RFC3339Nano)), withWorkflowID(name+"@"+at.UTC().Format(time.RFC3339Nano)))
}

func scheduleCreateGetList(t *testing.T, e *env) {
	sc := e.createSchedule("b")
	e.createSchedule("a")
	want := scheduleSpec()
	if sc.Workflow != want.Workflow || sc.Cron != want.Cron || sc.TimeZone != want.TimeZone ||
		string(sc.Input) != string(want.Input) || sc.Overlap != want.Overlap || sc.CatchupWindow != want.CatchupWindow || sc.Paused {
		t.Fatalf("created %+v, want spec %+v", sc, want)
	}
	if !sameTime(sc.LastFireAt, e.clk.Now()) || !sameTime(sc.CreatedAt, e.clk.Now()) {
		t.Fatalf("cursor %v created %v, want now %v", sc.LastFireAt, sc.CreatedAt, e.clk.Now())
	}
	got := e.getSchedule("b")
	if got.Name != "b" || got.Cron != want.Cron || !sameTime(got.LastFireAt, sc.LastFireAt) {
		t.Fatalf("get %+v", got)
	}
	list, err := e.st.ScheduleList(e.ctx, &store.ScheduleListParams{Namespace: ns})
	if err != nil || len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" {
		t.Fatalf("list = %v, %v; want a, b", list, err)
	}
	if other, err := e.st.ScheduleList(e.ctx, &store.ScheduleListParams{Namespace: "other"}); err != nil || len(other) != 0 {
		t.Fatalf("list other namespace = %v, %v", other, err)
	}
	if all, err := e.st.ScheduleList(e.ctx, &store.ScheduleListParams{}); err != nil || len(all) != 2 {
		t.Fatalf("list all = %v, %v", all, err)
	}
	if _, err := e.st.ScheduleGet(e.ctx, &store.ScheduleGetParams{Namespace: ns, Name: "zz"}); !errors.Is(err, store.ErrScheduleNotFound) {
		t.Fatalf("get unknown: %v, want ErrScheduleNotFound", err)
	}
}

func scheduleCreateExists(t *testing.T, e *env) {
	e.createSchedule("a")
	p := &store.ScheduleCreateParams{Namespace: ns, Name: "a", Spec: scheduleSpec()}
	p.Spec.Cron = "@hourly"
	if _, err := e.st.ScheduleCreate(e.ctx, p); !errors.Is(err, store.ErrScheduleExists) {
		t.Fatalf("duplicate create: %v, want ErrScheduleExists", err)
	}
	if got := e.getSchedule("a"); got.Cron != scheduleSpec().Cron {
		t.Fatalf("duplicate create changed the schedule: %+v", got)
	}
}

func scheduleInvalidParams(t *testing.T, e *env) {
	bad := []func(p *store.ScheduleCreateParams){
		func(p *store.ScheduleCreateParams) { p.Name = "" },
		func(p *store.ScheduleCreateParams) { p.Namespace = "" },
		func(p *store.ScheduleCreateParams) { p.Spec.Workflow = "" },
		func(p *store.ScheduleCreateParams) { p.Spec.Cron = "" },
		func(p *store.ScheduleCreateParams) { p.Spec.Overlap = "sometimes" },
		func(p *store.ScheduleCreateParams) { p.Spec.CatchupWindow = 0 },
		func(p *store.ScheduleCreateParams) { p.Spec.CatchupWindow = -time.Second },
		// Names by the one rule (store.ValidateName).
		func(p *store.ScheduleCreateParams) { p.Name = "a/b" },
		func(p *store.ScheduleCreateParams) { p.Name = "nightly*" },
		func(p *store.ScheduleCreateParams) { p.Name = ".." },
		func(p *store.ScheduleCreateParams) { p.Name = "a\u200eb" }, // a format character
		func(p *store.ScheduleCreateParams) { p.Spec.Workflow = "a/b" },
		func(p *store.ScheduleCreateParams) { p.Spec.Workflow = "w\x00" },
		func(p *store.ScheduleCreateParams) { p.Spec.Queue = "q*" },
		func(p *store.ScheduleCreateParams) { p.Spec.Queue = "a b" },
	}
	for i, f := range bad {
		p := &store.ScheduleCreateParams{Namespace: ns, Name: "x", Spec: scheduleSpec()}
		f(p)
		if _, err := e.st.ScheduleCreate(e.ctx, p); !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("case %d: %v, want ErrInvalidParams", i, err)
		}
	}
	if list, _ := e.st.ScheduleList(e.ctx, &store.ScheduleListParams{}); len(list) != 0 {
		t.Fatalf("invalid creates left %d schedules", len(list))
	}
	if _, err := e.st.SchedulerLeaseAcquire(e.ctx, &store.SchedulerLeaseParams{Owner: "a"}); !errors.Is(err, store.ErrInvalidParams) {
		t.Fatalf("lease without duration: %v", err)
	}
	if _, err := e.st.ScheduleFire(e.ctx, &store.ScheduleFireParams{Namespace: ns, Name: "x", Epoch: -1}); !errors.Is(err, store.ErrInvalidParams) {
		t.Fatalf("negative epoch: %v", err)
	}
}

func scheduleUpdateMovesCursor(t *testing.T, e *env) {
	e.createSchedule("a")
	now := e.clk.Advance(time.Hour)
	spec := scheduleSpec()
	spec.Cron, spec.Overlap, spec.CatchupWindow = "@daily", store.OverlapAllowAll, time.Hour
	got, err := e.st.ScheduleUpdate(e.ctx, &store.ScheduleUpdateParams{Namespace: ns, Name: "a", Spec: spec})
	if err != nil {
		t.Fatal(err)
	}
	if got.Cron != "@daily" || got.Overlap != store.OverlapAllowAll || !sameTime(got.LastFireAt, now) || !sameTime(got.UpdatedAt, now) {
		t.Fatalf("updated %+v", got)
	}
	if _, err := e.st.ScheduleUpdate(e.ctx, &store.ScheduleUpdateParams{Namespace: ns, Name: "zz", Spec: spec}); !errors.Is(err, store.ErrScheduleNotFound) {
		t.Fatalf("update unknown: %v", err)
	}
	spec.Workflow = ""
	if _, err := e.st.ScheduleUpdate(e.ctx, &store.ScheduleUpdateParams{Namespace: ns, Name: "a", Spec: spec}); !errors.Is(err, store.ErrInvalidParams) {
		t.Fatalf("invalid update: %v", err)
	}
	if e.getSchedule("a").Workflow != wf {
		t.Fatal("an invalid update changed the schedule")
	}
}

func schedulePauseResume(t *testing.T, e *env) {
	e.createSchedule("a")
	pause := func(p bool) (*store.Schedule, error) {
		return e.st.SchedulePause(e.ctx, &store.SchedulePauseParams{Namespace: ns, Name: "a", Paused: p})
	}
	if _, err := pause(false); !errors.Is(err, store.ErrScheduleNotPaused) {
		t.Fatalf("resume active: %v, want ErrScheduleNotPaused", err)
	}
	sc, err := pause(true)
	if err != nil || !sc.Paused {
		t.Fatalf("pause: %+v, %v", sc, err)
	}
	e.clk.Advance(time.Minute)
	if _, err := pause(true); !errors.Is(err, store.ErrSchedulePaused) {
		t.Fatalf("pause paused: %v, want ErrSchedulePaused", err)
	}
	if got := e.getSchedule("a"); !got.Paused || !sameTime(got.UpdatedAt, sc.UpdatedAt) {
		t.Fatalf("pausing a paused schedule changed it: %+v", got)
	}
	now := e.clk.Advance(time.Hour)
	sc, err = pause(false)
	if err != nil || sc.Paused || !sameTime(sc.LastFireAt, now) {
		t.Fatalf("resume: %+v, %v (cursor must move to now %v)", sc, err, now)
	}
	if _, err := e.st.SchedulePause(e.ctx, &store.SchedulePauseParams{Namespace: ns, Name: "zz", Paused: true}); !errors.Is(err, store.ErrScheduleNotFound) {
		t.Fatalf("pause unknown: %v", err)
	}
}

func scheduleDelete(t *testing.T, e *env) {
	e.createSchedule("a")
	if err := e.st.ScheduleDelete(e.ctx, &store.ScheduleDeleteParams{Namespace: ns, Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.ScheduleGet(e.ctx, &store.ScheduleGetParams{Namespace: ns, Name: "a"}); !errors.Is(err, store.ErrScheduleNotFound) {
		t.Fatalf("get deleted: %v", err)
	}
	if err := e.st.ScheduleDelete(e.ctx, &store.ScheduleDeleteParams{Namespace: ns, Name: "a"}); !errors.Is(err, store.ErrScheduleNotFound) {
		t.Fatalf("delete twice: %v", err)
	}
}

func scheduleLeaseAcquireRenewTake(t *testing.T, e *env) {
	a := e.lease("a", 0)
	if !a.Held || a.Epoch != 1 || a.Owner != "a" {
		t.Fatalf("first acquire: %+v", a)
	}
	if b := e.lease("b", 0); b.Held || b.Owner != "a" || b.Epoch != 1 {
		t.Fatalf("b took a live lease: %+v", b)
	}
	e.clk.Advance(5 * time.Second)
	r := e.lease("a", 1)
	if !r.Held || r.Epoch != 1 || !sameTime(r.ExpiresAt, e.clk.Now().Add(10*time.Second)) {
		t.Fatalf("renew: %+v", r)
	}
	if s := e.lease("a", 7); s.Held {
		t.Fatalf("a renewed with a wrong epoch: %+v", s)
	}
	e.clk.Advance(11 * time.Second)
	b := e.lease("b", 0)
	if !b.Held || b.Epoch != 2 || b.Owner != "b" {
		t.Fatalf("b after expiry: %+v", b)
	}
	if a2 := e.lease("a", 1); a2.Held || a2.Owner != "b" {
		t.Fatalf("a renewed a lease b took: %+v", a2)
	}
}

func scheduleLeaseRelease(t *testing.T, e *env) {
	a := e.lease("a", 0)
	if err := e.st.SchedulerLeaseRelease(e.ctx, &store.SchedulerLeaseParams{Owner: "b", Epoch: a.Epoch}); err != nil {
		t.Fatal(err)
	}
	if b := e.lease("b", 0); b.Held {
		t.Fatal("a release by a non-holder freed the lease")
	}
	if err := e.st.SchedulerLeaseRelease(e.ctx, &store.SchedulerLeaseParams{Owner: "a", Epoch: a.Epoch}); err != nil {
		t.Fatal(err)
	}
	if b := e.lease("b", 0); !b.Held || b.Epoch != 2 {
		t.Fatalf("after release: %+v", b)
	}
}

func scheduleFireCreatesRunOnce(t *testing.T, e *env) {
	e.createSchedule("s")
	l := e.lease("a", 0)
	at := e.clk.Now().Add(time.Second)
	e.clk.Advance(time.Second)
	p := &store.ScheduleFireParams{Namespace: ns, Name: "s", Epoch: l.Epoch, Cursor: &at, Run: e.fireRun("s", at)}
	res, err := e.st.ScheduleFire(e.ctx, p)
	if err != nil || !res.Created || res.Run.ID != p.Run.ID || res.Run.Status != store.StatusPending {
		t.Fatalf("fire: %+v, %v", res, err)
	}
	sc := e.getSchedule("s")
	if !sameTime(sc.LastFireAt, at) || sc.LastRunID != p.Run.ID {
		t.Fatalf("after fire: cursor %v last run %q", sc.LastFireAt, sc.LastRunID)
	}
	// A retried fire (same deterministic run ID) finds the run.
	res2, err := e.st.ScheduleFire(e.ctx, p)
	if err != nil || res2.Created || res2.Run.ID != p.Run.ID || res2.Run.Sequence != res.Run.Sequence {
		t.Fatalf("retried fire: %+v, %v", res2, err)
	}
	// A manual fire (epoch 0) is not fenced and leaves the cursor.
	e.clk.Advance(time.Minute)
	l = e.lease("a", l.Epoch+1) // expired: taken again with the next epoch
	manual := &store.ScheduleFireParams{Namespace: ns, Name: "s", Run: e.fireRun("s-manual", e.clk.Now())}
	if !l.Held || l.Epoch != 2 {
		t.Fatalf("re-acquire after expiry: %+v", l)
	}
	if res, err := e.st.ScheduleFire(e.ctx, manual); err != nil || !res.Created {
		t.Fatalf("manual fire: %+v, %v", res, err)
	}
	if sc := e.getSchedule("s"); !sameTime(sc.LastFireAt, at) {
		t.Fatalf("a manual fire moved the cursor to %v", sc.LastFireAt)
	}
	// The cursor never moves back.
	old := at.Add(-time.Hour)
	if _, err := e.st.ScheduleFire(e.ctx, &store.ScheduleFireParams{Namespace: ns, Name: "s", Epoch: l.Epoch, Cursor: &old}); err != nil {
		t.Fatal(err)
	}
	if sc := e.getSchedule("s"); !sameTime(sc.LastFireAt, at) {
		t.Fatalf("cursor moved back to %v", sc.LastFireAt)
	}
}

func scheduleFireFencedByEpoch(t *testing.T, e *env) {
	e.createSchedule("s")
	a := e.lease("a", 0)
	e.clk.Advance(11 * time.Second) // a's lease expires
	at := e.clk.Now()
	p := &store.ScheduleFireParams{Namespace: ns, Name: "s", Epoch: a.Epoch, Cursor: &at, Run: e.fireRun("s", at)}
	if _, err := e.st.ScheduleFire(e.ctx, p); !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("fire on an expired lease: %v, want ErrNotLeader", err)
	}
	b := e.lease("b", 0)
	if _, err := e.st.ScheduleFire(e.ctx, p); !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("fire with the old epoch: %v, want ErrNotLeader", err)
	}
	if _, err := e.st.RunGet(e.ctx, &store.RunGetParams{Namespace: ns, Ref: p.Run.ID}); !errors.Is(err, store.ErrRunNotFound) {
		t.Fatalf("a fenced fire created its run: %v", err)
	}
	if sc := e.getSchedule("s"); sameTime(sc.LastFireAt, at) {
		t.Fatal("a fenced fire moved the cursor")
	}
	p.Epoch = b.Epoch
	if res, err := e.st.ScheduleFire(e.ctx, p); err != nil || !res.Created {
		t.Fatalf("fire by the new leader: %+v, %v", res, err)
	}
}

func scheduleFireCancelPrevious(t *testing.T, e *env) {
	e.createSchedule("s")
	l := e.lease("a", 0)
	prev := e.create()
	at := e.clk.Now()
	p := &store.ScheduleFireParams{Namespace: ns, Name: "s", Epoch: l.Epoch, CancelRunID: prev.ID, Run: e.fireRun("s", at)}
	if _, err := e.st.ScheduleFire(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	if got := e.get(prev.ID); got.Status != store.StatusCancelled {
		t.Fatalf("previous run is %s, want cancelled", got.Status)
	}
	// Cancelling a finished (or unknown) previous run is no error.
	p.Run, p.CancelRunID = e.fireRun("s", at.Add(time.Second)), prev.ID
	if _, err := e.st.ScheduleFire(e.ctx, p); err != nil {
		t.Fatal(err)
	}
}

func scheduleFireBuffered(t *testing.T, e *env) {
	e.createSchedule("s")
	l := e.lease("a", 0)
	at := e.clk.Now()
	p := &store.ScheduleFireParams{Namespace: ns, Name: "s", Epoch: l.Epoch, Cursor: &at, SetBuffered: true, Buffered: &at}
	if res, err := e.st.ScheduleFire(e.ctx, p); err != nil || res.Run != nil {
		t.Fatalf("buffer: %+v, %v", res, err)
	}
	if sc := e.getSchedule("s"); sc.BufferedAt == nil || !sameTime(*sc.BufferedAt, at) {
		t.Fatalf("buffered at %v, want %v", sc.BufferedAt, at)
	}
	p = &store.ScheduleFireParams{Namespace: ns, Name: "s", Epoch: l.Epoch, SetBuffered: true, Run: e.fireRun("s", at)}
	if _, err := e.st.ScheduleFire(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	if sc := e.getSchedule("s"); sc.BufferedAt != nil || sc.LastRunID != p.Run.ID {
		t.Fatalf("after firing the buffered tick: %+v", sc)
	}
}

func scheduleFirePaused(t *testing.T, e *env) {
	e.createSchedule("s")
	l := e.lease("a", 0)
	if _, err := e.st.SchedulePause(e.ctx, &store.SchedulePauseParams{Namespace: ns, Name: "s", Paused: true}); err != nil {
		t.Fatal(err)
	}
	at := e.clk.Now()
	p := &store.ScheduleFireParams{Namespace: ns, Name: "s", Epoch: l.Epoch, Cursor: &at, Run: e.fireRun("s", at)}
	if _, err := e.st.ScheduleFire(e.ctx, p); !errors.Is(err, store.ErrSchedulePaused) {
		t.Fatalf("leader's fire of a paused schedule: %v, want ErrSchedulePaused", err)
	}
	if _, err := e.st.RunGet(e.ctx, &store.RunGetParams{Namespace: ns, Ref: p.Run.ID}); !errors.Is(err, store.ErrRunNotFound) {
		t.Fatalf("the refused fire created its run: %v", err)
	}
	p.Epoch, p.Cursor = 0, nil // a manual fire (trigger) of a paused schedule is allowed
	if res, err := e.st.ScheduleFire(e.ctx, p); err != nil || !res.Created {
		t.Fatalf("manual fire of a paused schedule: %+v, %v", res, err)
	}
}

func scheduleFireUnknown(t *testing.T, e *env) {
	l := e.lease("a", 0)
	p := &store.ScheduleFireParams{Namespace: ns, Name: "nope", Epoch: l.Epoch, Run: e.fireRun("nope", e.clk.Now())}
	if _, err := e.st.ScheduleFire(e.ctx, p); !errors.Is(err, store.ErrScheduleNotFound) {
		t.Fatalf("fire unknown schedule: %v", err)
	}
	if _, err := e.st.RunGet(e.ctx, &store.RunGetParams{Namespace: ns, Ref: p.Run.ID}); !errors.Is(err, store.ErrRunNotFound) {
		t.Fatalf("a failed fire created its run: %v", err)
	}
}

func scheduleIdempotent(t *testing.T, e *env) {
	rec := func(key string) *store.IdempotencyRecord {
		return rendered(key, []byte("fp-"+key), "storetest.empty")
	}
	p := &store.ScheduleCreateParams{Namespace: ns, Name: "a", Spec: scheduleSpec(), Idempotency: rec("k1")}
	if _, err := e.st.ScheduleCreate(e.ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Name = "b" // same key and fingerprint: nothing written
	if _, err := e.st.ScheduleCreate(e.ctx, p); !errors.Is(err, store.ErrIdempotencyKeyUsed) {
		t.Fatalf("reused key: %v, want ErrIdempotencyKeyUsed", err)
	}
	if _, err := e.st.ScheduleGet(e.ctx, &store.ScheduleGetParams{Namespace: ns, Name: "b"}); !errors.Is(err, store.ErrScheduleNotFound) {
		t.Fatalf("a create with a used key wrote: %v", err)
	}
	f := &store.ScheduleFireParams{Namespace: ns, Name: "a", Idempotency: rec("k2"),
		Runs: []*store.RunCreateParams{e.fireRun("a", e.clk.Now()), e.fireRun("a", e.clk.Now().Add(time.Minute))}}
	res, err := e.st.ScheduleFire(e.ctx, f)
	if err != nil || len(res.Runs) != 2 || res.Run != nil || !slices.Equal(res.RunsCreated, []bool{true, true}) {
		t.Fatalf("backfill fire: %+v, %v", res, err)
	}
	if _, err := e.st.ScheduleFire(e.ctx, f); !errors.Is(err, store.ErrIdempotencyKeyUsed) {
		t.Fatalf("reused fire key: %v", err)
	}
	// Without the key, the same backfill finds its runs and creates none.
	f.Idempotency = nil
	again, err := e.st.ScheduleFire(e.ctx, f)
	if err != nil || len(again.Runs) != 2 || again.Runs[0].Sequence != res.Runs[0].Sequence ||
		!slices.Equal(again.RunsCreated, []bool{false, false}) {
		t.Fatalf("backfill again: %+v, %v", again, err)
	}
	if e.getSchedule("a").LastRunID != f.Runs[1].ID {
		t.Fatal("the last backfilled run is not the schedule's last run")
	}
	l := e.lease("x", 0)
	bad := &store.ScheduleFireParams{Namespace: ns, Name: "a", Epoch: l.Epoch, Runs: f.Runs}
	if _, err := e.st.ScheduleFire(e.ctx, bad); !errors.Is(err, store.ErrInvalidParams) {
		t.Fatalf("Runs under an epoch: %v", err)
	}
}
