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
	return callV(ctx, c, ClientCall{Method: "CreateSchedule", Workflow: spec.Workflow, Ref: name}, func(ctx context.Context) (*Schedule, error) {
		o, err := oneOption("Client.CreateSchedule", opts)
		if err != nil {
			return nil, err
		}
		return c.b.createSchedule(ctx, name, spec, o)
	})
}

// GetSchedule returns a schedule. ErrScheduleNotFound when there is none.
func (c *Client) GetSchedule(ctx context.Context, name string) (*Schedule, error) {
	return callV(ctx, c, ClientCall{Method: "GetSchedule", Ref: name}, func(ctx context.Context) (*Schedule, error) { return c.b.getSchedule(ctx, name) })
}

// ListSchedules returns the namespace's schedules by name.
func (c *Client) ListSchedules(ctx context.Context) ([]*Schedule, error) {
	return callV(ctx, c, ClientCall{Method: "ListSchedules"}, c.b.listSchedules)
}

// UpdateSchedule replaces a schedule's spec (checked as CreateSchedule checks
// it); the new spec fires from now on, and a buffered tick is dropped.
func (c *Client) UpdateSchedule(ctx context.Context, name string, spec ScheduleSpec) (*Schedule, error) {
	return callV(ctx, c, ClientCall{Method: "UpdateSchedule", Workflow: spec.Workflow, Ref: name}, func(ctx context.Context) (*Schedule, error) { return c.b.updateSchedule(ctx, name, spec) })
}

// PauseSchedule pauses a schedule: no tick fires until ResumeSchedule.
// ErrSchedulePaused when it is paused already (nothing changes).
func (c *Client) PauseSchedule(ctx context.Context, name string) (*Schedule, error) {
	return callV(ctx, c, ClientCall{Method: "PauseSchedule", Ref: name}, func(ctx context.Context) (*Schedule, error) { return c.b.pauseSchedule(ctx, name, true) })
}

// ResumeSchedule resumes a paused schedule; ticks that fell due while it was
// paused are not caught up. ErrScheduleNotPaused when it is not paused.
func (c *Client) ResumeSchedule(ctx context.Context, name string) (*Schedule, error) {
	return callV(ctx, c, ClientCall{Method: "ResumeSchedule", Ref: name}, func(ctx context.Context) (*Schedule, error) { return c.b.pauseSchedule(ctx, name, false) })
}

// DeleteSchedule deletes a schedule; the runs it started stay.
func (c *Client) DeleteSchedule(ctx context.Context, name string) error {
	return c.call(ctx, ClientCall{Method: "DeleteSchedule", Ref: name}, func(ctx context.Context) error { return c.b.deleteSchedule(ctx, name) })
}

// TriggerSchedule starts one run of a schedule now, paused or not, whatever its
// overlap policy, and returns it. It moves no cursor: the schedule's ticks fire
// as before.
func (c *Client) TriggerSchedule(ctx context.Context, name string) (*Run, error) {
	return callV(ctx, c, ClientCall{Method: "TriggerSchedule", Ref: name}, func(ctx context.Context) (*Run, error) { return c.b.triggerSchedule(ctx, name) })
}

// BackfillSchedule starts the runs of a schedule's ticks in [start, end), paused
// or not, whatever its overlap policy, and returns them in tick order. Each has
// the run ID its tick has when it fires (schedule and fire time), so a tick that
// fired already, or an earlier backfill of it, is not started again: its run is
// returned. More than MaxBackfillRuns ticks, or end not after start, is
// ErrInvalidParams and starts nothing.
func (c *Client) BackfillSchedule(ctx context.Context, name string, start, end time.Time) ([]*Run, error) {
	return callV(ctx, c, ClientCall{Method: "BackfillSchedule", Ref: name}, func(ctx context.Context) ([]*Run, error) { return c.b.backfillSchedule(ctx, name, start, end) })
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
