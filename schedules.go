package trellis

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
	"unicode"

	"github.com/trellis-dev/trellis/internal/schedule"
	"github.com/trellis-dev/trellis/store"
)

// Schedules start runs of a workflow on a cron expression in a time zone; one
// scheduler, leader among the processes on a store, fires them (see
// docs/schedules.md).

// Errors of schedules.
var (
	// ErrScheduleNotFound: no schedule has this name in the namespace.
	ErrScheduleNotFound = store.ErrScheduleNotFound
	// ErrScheduleExists: a schedule with this name exists in the namespace.
	ErrScheduleExists = store.ErrScheduleExists
	// ErrSchedulePaused: pausing a schedule that is paused.
	ErrSchedulePaused = store.ErrSchedulePaused
	// ErrScheduleNotPaused: resuming a schedule that is not paused.
	ErrScheduleNotPaused = store.ErrScheduleNotPaused
)

// Overlap says what a schedule does at a tick while its previous run is active.
type Overlap string

// Overlap policies.
const (
	// OverlapSkip (the default) skips the tick.
	OverlapSkip Overlap = "skip"
	// OverlapBufferOne keeps one tick and starts it when the previous run ends;
	// ticks meanwhile beyond that one are skipped.
	OverlapBufferOne Overlap = "buffer_one"
	// OverlapAllowAll starts a run at every tick.
	OverlapAllowAll Overlap = "allow_all"
	// OverlapCancelPrevious cancels the previous run and starts a new one.
	OverlapCancelPrevious Overlap = "cancel_previous"
)

// DefaultCatchupWindow is a schedule's catch-up window when none is given.
const DefaultCatchupWindow = time.Minute

// MaxBackfillRuns caps the runs one BackfillSchedule starts.
const MaxBackfillRuns = schedule.MaxBackfill

// ScheduleSpec is what a schedule does. In JSON, catchup_window is a Go duration
// string such as "10m".
type ScheduleSpec struct {
	// Workflow is the workflow's name. It need not be served yet: as a start
	// by name, the schedule's runs wait, pending, with a wait reason that says
	// so, until a live worker serves the workflow.
	Workflow string `json:"workflow"`
	// Queue is the queue of the runs; default the registered workflow's, else
	// "default".
	Queue string `json:"queue,omitempty"`
	// Input is the runs' encoded input (JSON); empty is null.
	Input Payload `json:"input,omitempty"`
	// Cron: 5 fields (minute hour day-of-month month day-of-week), or 6 with a
	// seconds field first, or a descriptor: @yearly, @monthly, @weekly, @daily,
	// @hourly, @every <duration> (at least 1s).
	Cron string `json:"cron"`
	// TimeZone is the IANA zone the cron expression reads in, e.g.
	// "Europe/Berlin"; default "UTC".
	TimeZone string `json:"time_zone,omitempty"`
	// Overlap is the policy at a tick while the previous run is active; default
	// OverlapSkip.
	Overlap Overlap `json:"overlap,omitempty"`
	// CatchupWindow is how late a tick may still fire, after downtime or a
	// change of scheduler leader; older ticks are skipped. Default
	// DefaultCatchupWindow.
	CatchupWindow time.Duration `json:"catchup_window,omitempty"`
}

// specJSON is the JSON form of ScheduleSpec: the window as a Go duration string.
type specJSON struct {
	Workflow      string  `json:"workflow"`
	Queue         string  `json:"queue,omitempty"`
	Input         Payload `json:"input,omitempty"`
	Cron          string  `json:"cron"`
	TimeZone      string  `json:"time_zone,omitempty"`
	Overlap       Overlap `json:"overlap,omitempty"`
	CatchupWindow string  `json:"catchup_window,omitempty"`
}

// MarshalJSON implements json.Marshaler: catchup_window is a duration string
// such as "1m0s".
func (s ScheduleSpec) MarshalJSON() ([]byte, error) {
	j := specJSON{Workflow: s.Workflow, Queue: s.Queue, Input: s.Input, Cron: s.Cron,
		TimeZone: s.TimeZone, Overlap: s.Overlap}
	if s.CatchupWindow != 0 {
		j.CatchupWindow = s.CatchupWindow.String()
	}
	return json.Marshal(j)
}

// UnmarshalJSON implements json.Unmarshaler.
func (s *ScheduleSpec) UnmarshalJSON(b []byte) error {
	var j specJSON
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&j); err != nil {
		return fmt.Errorf("%w: schedule spec: %v", ErrInvalidParams, err)
	}
	*s = ScheduleSpec{Workflow: j.Workflow, Queue: j.Queue, Input: j.Input, Cron: j.Cron,
		TimeZone: j.TimeZone, Overlap: j.Overlap}
	if j.CatchupWindow != "" {
		d, err := time.ParseDuration(j.CatchupWindow)
		if err != nil {
			return fmt.Errorf("%w: catchup_window %q: want a duration such as \"10m\"", ErrInvalidParams, j.CatchupWindow)
		}
		s.CatchupWindow = d
	}
	return nil
}

// Schedule is a schedule and its state.
type Schedule struct {
	Namespace string       `json:"namespace"`
	Name      string       `json:"name"`
	Spec      ScheduleSpec `json:"spec"`
	Paused    bool         `json:"paused"`
	// LastFireAt is the schedule's cursor: its ticks up to this time are
	// handled (fired, skipped or buffered).
	LastFireAt time.Time `json:"last_fire_at"`
	// NextFireAt is the next tick after the cursor (nil while paused).
	NextFireAt *time.Time `json:"next_fire_at,omitempty"`
	// LastRunID is the run the schedule started last.
	LastRunID string `json:"last_run_id,omitempty"`
	// BufferedAt is the tick that OverlapBufferOne keeps, if any.
	BufferedAt *time.Time `json:"buffered_at,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
}

// CreateScheduleOptions are the options of CreateSchedule.
type CreateScheduleOptions struct {
	// Paused creates the schedule paused.
	Paused bool
}

// MaxScheduleNameLen caps a schedule's name.
const MaxScheduleNameLen = 100

// checkScheduleName checks a schedule's name: 1 to MaxScheduleNameLen printable
// characters, no spaces or slashes (it is part of run IDs and URLs).
func checkScheduleName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: schedule name is required", ErrInvalidParams)
	case len(name) > MaxScheduleNameLen:
		return fmt.Errorf("%w: schedule name is longer than %d bytes", ErrInvalidParams, MaxScheduleNameLen)
	case strings.IndexFunc(name, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) || r == '/' || r == '\\' }) >= 0:
		return fmt.Errorf("%w: schedule name %q: no spaces, slashes or control characters", ErrInvalidParams, name)
	}
	return nil
}

// storeSpec checks spec, applies its defaults, and returns it as stored. A
// workflow registered here gets its input checked and its queue as default;
// one that is not is taken as named (its runs wait until a worker serves it).
func (c *Client) storeSpec(spec ScheduleSpec) (store.ScheduleSpec, error) {
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
	if len(out.Input) > c.cfg.MaxPayloadBytes {
		return out, fmt.Errorf("%w: input is %d bytes (limit %d)", ErrPayloadTooLarge, len(out.Input), c.cfg.MaxPayloadBytes)
	}
	if out.Workflow == "" {
		return out, fmt.Errorf("%w: workflow is required", ErrInvalidParams)
	}
	input := []byte(out.Input)
	if len(input) == 0 {
		input = []byte("null")
	}
	if def, ok := c.reg.get(out.Workflow); ok {
		if err := def.checkIn(c.cfg.Codec, input); err != nil {
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

// scheduleRecord is the SDK's record of a stored schedule.
func scheduleRecord(sc *store.Schedule) *Schedule {
	out := &Schedule{Namespace: sc.Namespace, Name: sc.Name, Paused: sc.Paused,
		Spec: ScheduleSpec{Workflow: sc.Workflow, Queue: sc.Queue, Input: Payload(sc.Input), Cron: sc.Cron,
			TimeZone: sc.TimeZone, Overlap: Overlap(sc.Overlap), CatchupWindow: sc.CatchupWindow},
		LastFireAt: sc.LastFireAt, LastRunID: sc.LastRunID, BufferedAt: sc.BufferedAt,
		CreatedAt: sc.CreatedAt, UpdatedAt: sc.UpdatedAt}
	if !sc.Paused {
		if spec, err := schedule.Parse(sc.Cron, sc.TimeZone); err == nil {
			if next := spec.Next(sc.LastFireAt); !next.IsZero() {
				out.NextFireAt = &next
			}
		}
	}
	return out
}

// CreateSchedule creates a schedule named name in the client's namespace. Its
// first tick is the first after now. Invalid cron expressions, time zones,
// overlap policies and windows are ErrInvalidParams, an input that a workflow
// registered with this client cannot decode ErrInvalidInput, a taken name
// ErrScheduleExists; nothing is created then. A workflow that no live worker
// serves is accepted, as StartRaw accepts it: the runs wait, pending, with a
// wait reason that says so, until a worker serves it.
func (c *Client) CreateSchedule(ctx context.Context, name string, spec ScheduleSpec, opts ...CreateScheduleOptions) (*Schedule, error) {
	return callV(ctx, c, ClientCall{Method: "CreateSchedule", Workflow: spec.Workflow, Ref: name}, func(ctx context.Context) (*Schedule, error) { return c.doCreateSchedule(ctx, name, spec, opts...) })
}

// doCreateSchedule is CreateSchedule without the call interceptors.
func (c *Client) doCreateSchedule(ctx context.Context, name string, spec ScheduleSpec, opts ...CreateScheduleOptions) (*Schedule, error) {
	o, err := oneOption("Client.CreateSchedule", opts)
	if err != nil {
		return nil, err
	}
	if c.remote != nil {
		return c.remote.createSchedule(ctx, name, spec, o)
	}
	if err := checkScheduleName(name); err != nil {
		return nil, fmt.Errorf("creating schedule: %w", err)
	}
	sp, err := c.storeSpec(spec)
	if err != nil {
		return nil, fmt.Errorf("creating schedule %s: %w", name, err)
	}
	sc, err := c.store.ScheduleCreate(ctx, &store.ScheduleCreateParams{Namespace: c.cfg.Namespace, Name: name, Spec: sp, Paused: o.Paused,
		Idempotency: idempotency(ctx, scheduleResult)})
	if err != nil {
		return nil, err
	}
	return scheduleRecord(sc), nil
}

// GetSchedule returns a schedule. ErrScheduleNotFound when there is none.
func (c *Client) GetSchedule(ctx context.Context, name string) (*Schedule, error) {
	return callV(ctx, c, ClientCall{Method: "GetSchedule", Ref: name}, func(ctx context.Context) (*Schedule, error) { return c.doGetSchedule(ctx, name) })
}

// doGetSchedule is GetSchedule without the call interceptors.
func (c *Client) doGetSchedule(ctx context.Context, name string) (*Schedule, error) {
	if c.remote != nil {
		return c.remote.getSchedule(ctx, name)
	}
	sc, err := c.store.ScheduleGet(ctx, &store.ScheduleGetParams{Namespace: c.cfg.Namespace, Name: name})
	if err != nil {
		return nil, err
	}
	return scheduleRecord(sc), nil
}

// ListSchedules returns the namespace's schedules by name.
func (c *Client) ListSchedules(ctx context.Context) ([]*Schedule, error) {
	return callV(ctx, c, ClientCall{Method: "ListSchedules"}, c.doListSchedules)
}

// doListSchedules is ListSchedules without the call interceptors.
func (c *Client) doListSchedules(ctx context.Context) ([]*Schedule, error) {
	if c.remote != nil {
		return c.remote.listSchedules(ctx)
	}
	list, err := c.store.ScheduleList(ctx, &store.ScheduleListParams{Namespace: c.cfg.Namespace})
	if err != nil {
		return nil, err
	}
	out := make([]*Schedule, len(list))
	for i, sc := range list {
		out[i] = scheduleRecord(sc)
	}
	return out, nil
}

// UpdateSchedule replaces a schedule's spec (checked as CreateSchedule checks
// it); the new spec fires from now on, and a buffered tick is dropped.
func (c *Client) UpdateSchedule(ctx context.Context, name string, spec ScheduleSpec) (*Schedule, error) {
	return callV(ctx, c, ClientCall{Method: "UpdateSchedule", Workflow: spec.Workflow, Ref: name}, func(ctx context.Context) (*Schedule, error) { return c.doUpdateSchedule(ctx, name, spec) })
}

// doUpdateSchedule is UpdateSchedule without the call interceptors.
func (c *Client) doUpdateSchedule(ctx context.Context, name string, spec ScheduleSpec) (*Schedule, error) {
	if c.remote != nil {
		return c.remote.updateSchedule(ctx, name, spec)
	}
	if err := checkScheduleName(name); err != nil {
		return nil, fmt.Errorf("updating schedule: %w", err)
	}
	sp, err := c.storeSpec(spec)
	if err != nil {
		return nil, fmt.Errorf("updating schedule %s: %w", name, err)
	}
	sc, err := c.store.ScheduleUpdate(ctx, &store.ScheduleUpdateParams{Namespace: c.cfg.Namespace, Name: name, Spec: sp,
		Idempotency: idempotency(ctx, scheduleResult)})
	if err != nil {
		return nil, err
	}
	return scheduleRecord(sc), nil
}

// PauseSchedule pauses a schedule: no tick fires until ResumeSchedule.
// ErrSchedulePaused when it is paused already (nothing changes).
func (c *Client) PauseSchedule(ctx context.Context, name string) (*Schedule, error) {
	return callV(ctx, c, ClientCall{Method: "PauseSchedule", Ref: name}, func(ctx context.Context) (*Schedule, error) { return c.pauseSchedule(ctx, name, true) })
}

// ResumeSchedule resumes a paused schedule; ticks that fell due while it was
// paused are not caught up. ErrScheduleNotPaused when it is not paused.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (*Schedule, error) {
	return callV(ctx, c, ClientCall{Method: "ResumeSchedule", Ref: name}, func(ctx context.Context) (*Schedule, error) { return c.pauseSchedule(ctx, name, false) })
}

func (c *Client) pauseSchedule(ctx context.Context, name string, paused bool) (*Schedule, error) {
	if c.remote != nil {
		return c.remote.pauseSchedule(ctx, name, paused)
	}
	sc, err := c.store.SchedulePause(ctx, &store.SchedulePauseParams{Namespace: c.cfg.Namespace, Name: name, Paused: paused,
		Idempotency: idempotency(ctx, scheduleResult)})
	if err != nil {
		return nil, err
	}
	return scheduleRecord(sc), nil
}

// DeleteSchedule deletes a schedule; the runs it started stay.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	return c.call(ctx, ClientCall{Method: "DeleteSchedule", Ref: name}, func(ctx context.Context) error { return c.doDeleteSchedule(ctx, name) })
}

// doDeleteSchedule is DeleteSchedule without the call interceptors.
func (c *Client) doDeleteSchedule(ctx context.Context, name string) error {
	if c.remote != nil {
		return c.remote.deleteSchedule(ctx, name)
	}
	return c.store.ScheduleDelete(ctx, &store.ScheduleDeleteParams{Namespace: c.cfg.Namespace, Name: name,
		Idempotency: idempotency(ctx, noResult)})
}

// TriggerSchedule starts one run of a schedule now, paused or not, whatever its
// overlap policy, and returns it. It moves no cursor: the schedule's ticks fire
// as before.
func (c *Client) TriggerSchedule(ctx context.Context, name string) (*Run, error) {
	return callV(ctx, c, ClientCall{Method: "TriggerSchedule", Ref: name}, func(ctx context.Context) (*Run, error) { return c.doTriggerSchedule(ctx, name) })
}

// doTriggerSchedule is TriggerSchedule without the call interceptors.
func (c *Client) doTriggerSchedule(ctx context.Context, name string) (*Run, error) {
	if c.remote != nil {
		return c.remote.triggerSchedule(ctx, name)
	}
	sc, err := c.store.ScheduleGet(ctx, &store.ScheduleGetParams{Namespace: c.cfg.Namespace, Name: name})
	if err != nil {
		return nil, err
	}
	res, err := c.store.ScheduleFire(ctx, &store.ScheduleFireParams{Namespace: sc.Namespace, Name: sc.Name,
		Run:         schedule.RunParams(sc, schedule.TriggerRunID(sc.Name, c.cfg.Clock.Now()), c.version(sc.Workflow)),
		Idempotency: idempotency(ctx, firedRun)})
	if err != nil {
		return nil, fmt.Errorf("triggering schedule %s: %w", name, err)
	}
	if res.Created {
		c.scheduledStart(res.Run)
	}
	return runFromStore(res.Run), nil
}

// BackfillSchedule starts the runs of a schedule's ticks in [start, end), paused
// or not, whatever its overlap policy, and returns them in tick order. Each has
// the run ID its tick has when it fires (schedule and fire time), so a tick that
// fired already, or an earlier backfill of it, is not started again: its run is
// returned. More than MaxBackfillRuns ticks, or end not after start, is
// ErrInvalidParams and starts nothing.
func (c *Client) BackfillSchedule(ctx context.Context, name string, start, end time.Time) ([]*Run, error) {
	return callV(ctx, c, ClientCall{Method: "BackfillSchedule", Ref: name}, func(ctx context.Context) ([]*Run, error) { return c.doBackfillSchedule(ctx, name, start, end) })
}

// doBackfillSchedule is BackfillSchedule without the call interceptors.
func (c *Client) doBackfillSchedule(ctx context.Context, name string, start, end time.Time) ([]*Run, error) {
	if c.remote != nil {
		return c.remote.backfillSchedule(ctx, name, start, end)
	}
	if !end.After(start) {
		return nil, fmt.Errorf("backfilling schedule %s: %w: end %s is not after start %s", name, ErrInvalidParams,
			end.Format(time.RFC3339), start.Format(time.RFC3339))
	}
	sc, err := c.store.ScheduleGet(ctx, &store.ScheduleGetParams{Namespace: c.cfg.Namespace, Name: name})
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
	p := &store.ScheduleFireParams{Namespace: sc.Namespace, Name: sc.Name, Idempotency: idempotency(ctx, backfilledRuns)}
	for _, at := range ticks {
		p.Runs = append(p.Runs, schedule.RunParams(sc, schedule.RunID(sc.Name, at), c.version(sc.Workflow)))
	}
	if len(p.Runs) == 0 {
		return []*Run{}, nil
	}
	res, err := c.store.ScheduleFire(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("backfilling schedule %s: %w", name, err)
	}
	for i, r := range res.Runs {
		if i < len(res.RunsCreated) && res.RunsCreated[i] {
			c.scheduledStart(r)
		}
	}
	return runsFromStore(res.Runs), nil
}

// BackfillResult is the response of a backfill in the HTTP API.
type BackfillResult struct {
	Runs []*Run `json:"runs"`
}

// Converters of guarded schedule calls' results (see idempotency).
func scheduleResult(result any) any { return scheduleRecord(result.(*store.Schedule)) }
func firedRun(result any) any       { return runFromStore(result.(*store.ScheduleFireResult).Run) }
func backfilledRuns(result any) any {
	return BackfillResult{Runs: runsFromStore(result.(*store.ScheduleFireResult).Runs)}
}

// version is the version runs of workflow start with: the registered one's.
func (c *Client) version(workflow string) int {
	if def, ok := c.reg.get(workflow); ok {
		return def.opts.Version
	}
	return 0
}

// scheduledStart counts a run that a schedule of this client's store started
// (its scheduler's fires, TriggerSchedule, BackfillSchedule) in the metrics'
// trellis_runs_started_total, as a Start is counted.
func (c *Client) scheduledStart(run *store.Run) {
	if m := c.cfg.Metrics; m != nil {
		m.ObserveStarted(run.Workflow)
	}
}
