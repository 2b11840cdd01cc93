package trellis

import (
	"context"
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/internal/schedule"
	"github.com/trellis-dev/trellis/store"
)

// The embedded backend's schedules: their records on the store, and the runs
// TriggerSchedule and BackfillSchedule fire.

// storeSpec checks spec, applies its defaults, and returns it as stored. A
// workflow registered here gets its input checked and its queue as default;
// one that is not is taken as named (its runs wait until a worker serves it).
func (e *embedded) storeSpec(spec ScheduleSpec) (store.ScheduleSpec, error) {
	out := store.ScheduleSpec{Workflow: spec.Workflow, Queue: spec.Queue, Input: spec.Input, Cron: spec.Cron,
		TimeZone: spec.TimeZone, Overlap: store.Overlap(spec.Overlap), CatchupWindow: spec.CatchupWindow}
	if out.TimeZone == "" {
		out.TimeZone = "UTC"
	}
	if out.Overlap == "" {
		out.Overlap = store.OverlapSkip
	}
	switch {
	case out.CatchupWindow == 0:
		out.CatchupWindow = DefaultCatchupWindow
	case out.CatchupWindow < 0:
		return out, fmt.Errorf("%w: catch-up window %s is negative", ErrInvalidParams, out.CatchupWindow)
	}
	if !out.Overlap.Valid() {
		return out, fmt.Errorf("%w: overlap policy %q: want skip, buffer_one, allow_all or cancel_previous", ErrInvalidParams, spec.Overlap)
	}
	if _, err := schedule.Parse(out.Cron, out.TimeZone); err != nil {
		return out, fmt.Errorf("%w: %v", ErrInvalidParams, err)
	}
	if len(out.Input) > e.cfg.MaxPayloadBytes {
		return out, fmt.Errorf("%w: input is %d bytes (limit %d)", ErrPayloadTooLarge, len(out.Input), e.cfg.MaxPayloadBytes)
	}
	if out.Workflow == "" {
		return out, fmt.Errorf("%w: workflow is required", ErrInvalidParams)
	}
	input := []byte(out.Input)
	if len(input) == 0 {
		input = []byte("null")
	}
	if def, ok := e.reg.get(out.Workflow); ok {
		if err := def.checkIn(e.cfg.Codec, input); err != nil {
			return out, err
		}
		if out.Queue == "" {
			out.Queue = def.opts.Queue
		}
	}
	if out.Queue == "" {
		out.Queue = "default"
	}
	return out, nil
}

func (e *embedded) createSchedule(ctx context.Context, name string, spec ScheduleSpec, o CreateScheduleOptions) (*Schedule, error) {
	if err := checkScheduleName(name); err != nil {
		return nil, fmt.Errorf("creating schedule: %w", err)
	}
	sp, err := e.storeSpec(spec)
	if err != nil {
		return nil, fmt.Errorf("creating schedule %s: %w", name, err)
	}
	sc, err := e.store.ScheduleCreate(ctx, &store.ScheduleCreateParams{Namespace: e.cfg.Namespace, Name: name, Spec: sp, Paused: o.Paused,
		Idempotency: e.idempotency("scheduleResult")})
	if err != nil {
		return nil, err
	}
	return scheduleRecord(sc), nil
}

func (e *embedded) getSchedule(ctx context.Context, name string) (*Schedule, error) {
	sc, err := e.store.ScheduleGet(ctx, &store.ScheduleGetParams{Namespace: e.cfg.Namespace, Name: name})
	if err != nil {
		return nil, err
	}
	return scheduleRecord(sc), nil
}

func (e *embedded) listSchedules(ctx context.Context) ([]*Schedule, error) {
	list, err := e.store.ScheduleList(ctx, &store.ScheduleListParams{Namespace: e.cfg.Namespace})
	if err != nil {
		return nil, err
	}
	out := make([]*Schedule, len(list))
	for i, sc := range list {
		out[i] = scheduleRecord(sc)
	}
	return out, nil
}

func (e *embedded) updateSchedule(ctx context.Context, name string, spec ScheduleSpec) (*Schedule, error) {
	if err := checkScheduleName(name); err != nil {
		return nil, fmt.Errorf("updating schedule: %w", err)
	}
	sp, err := e.storeSpec(spec)
	if err != nil {
		return nil, fmt.Errorf("updating schedule %s: %w", name, err)
	}
	sc, err := e.store.ScheduleUpdate(ctx, &store.ScheduleUpdateParams{Namespace: e.cfg.Namespace, Name: name, Spec: sp,
		Idempotency: e.idempotency("scheduleResult")})
	if err != nil {
		return nil, err
	}
	return scheduleRecord(sc), nil
}

func (e *embedded) pauseSchedule(ctx context.Context, name string, paused bool) (*Schedule, error) {
	sc, err := e.store.SchedulePause(ctx, &store.SchedulePauseParams{Namespace: e.cfg.Namespace, Name: name, Paused: paused,
		Idempotency: e.idempotency("scheduleResult")})
	if err != nil {
		return nil, err
	}
	return scheduleRecord(sc), nil
}

func (e *embedded) deleteSchedule(ctx context.Context, name string) error {
	return e.store.ScheduleDelete(ctx, &store.ScheduleDeleteParams{Namespace: e.cfg.Namespace, Name: name,
		Idempotency: e.idempotency("noResult")})
}

func (e *embedded) triggerSchedule(ctx context.Context, name string) (*Run, error) {
	sc, err := e.store.ScheduleGet(ctx, &store.ScheduleGetParams{Namespace: e.cfg.Namespace, Name: name})
	if err != nil {
		return nil, err
	}
	res, err := e.store.ScheduleFire(ctx, &store.ScheduleFireParams{Namespace: sc.Namespace, Name: sc.Name,
		Run:         schedule.RunParams(sc, schedule.TriggerRunID(sc.Name, e.cfg.Clock.Now()), e.version(sc.Workflow)),
		Idempotency: e.idempotency("firedRun")})
	if err != nil {
		return nil, fmt.Errorf("triggering schedule %s: %w", name, err)
	}
	if res.Created {
		e.scheduledStart(res.Run)
	}
	return runFromStore(res.Run), nil
}

func (e *embedded) backfillSchedule(ctx context.Context, name string, start, end time.Time) ([]*Run, error) {
	if !end.After(start) {
		return nil, fmt.Errorf("backfilling schedule %s: %w: end %s is not after start %s", name, ErrInvalidParams,
			end.Format(time.RFC3339), start.Format(time.RFC3339))
	}
	sc, err := e.store.ScheduleGet(ctx, &store.ScheduleGetParams{Namespace: e.cfg.Namespace, Name: name})
	if err != nil {
		return nil, err
	}
	spec, err := schedule.Parse(sc.Cron, sc.TimeZone)
	if err != nil {
		return nil, fmt.Errorf("backfilling schedule %s: %w", name, err)
	}
	ticks, ok := schedule.Ticks(spec, start, end, MaxBackfillRuns)
	if !ok {
		return nil, fmt.Errorf("backfilling schedule %s: %w: more than %d ticks in [%s, %s)", name, ErrInvalidParams,
			MaxBackfillRuns, start.Format(time.RFC3339), end.Format(time.RFC3339))
	}
	p := &store.ScheduleFireParams{Namespace: sc.Namespace, Name: sc.Name, Idempotency: e.idempotency("backfilledRuns")}
	for _, at := range ticks {
		p.Runs = append(p.Runs, schedule.RunParams(sc, schedule.RunID(sc.Name, at), e.version(sc.Workflow)))
	}
	if len(p.Runs) == 0 {
		return []*Run{}, nil
	}
	res, err := e.store.ScheduleFire(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("backfilling schedule %s: %w", name, err)
	}
	for i, r := range res.Runs {
		if i < len(res.RunsCreated) && res.RunsCreated[i] {
			e.scheduledStart(r)
		}
	}
	return runsFromStore(res.Runs), nil
}

// version is the version runs of workflow start with: the registered one's.
func (e *embedded) version(workflow string) int {
	if def, ok := e.reg.get(workflow); ok {
		return def.opts.Version
	}
	return 0
}

// scheduledStart counts a run that a schedule of this client's store started
// (its scheduler's fires, TriggerSchedule, BackfillSchedule) in the metrics'
// trellis_runs_started_total, as a Start is counted.
func (e *embedded) scheduledStart(run *store.Run) {
	if m := e.cfg.Metrics; m != nil {
		m.observeStarted(run.Workflow)
	}
}
