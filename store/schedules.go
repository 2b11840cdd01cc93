package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// ScheduleStore keeps schedules (a workflow started on a cron expression) and the
// scheduler's lease (see docs/schedules.md). The store does not parse cron
// expressions or time zones: the caller (the SDK, the server) checks them before it
// writes; the store checks the fields it can and the lease.
//
// Fencing: exactly one scheduler is leader among all processes on a store. The
// leader holds the scheduler lease (SchedulerLeaseAcquire) with an epoch that grows
// by one at every change of hands, and writes every tick with ScheduleFire under
// that epoch. ScheduleFire checks, in the transaction that creates the run, that the
// epoch is still the lease's and the lease unexpired: a former leader that was
// paused or partitioned gets ErrNotLeader and writes nothing.
type ScheduleStore interface {
	// ScheduleCreate stores a new schedule; its cursor (LastFireAt) is now, so
	// nothing before its creation fires. ErrScheduleExists when the name is taken
	// in the namespace.
	ScheduleCreate(ctx context.Context, p *ScheduleCreateParams) (*Schedule, error)
	// ScheduleGet returns one schedule. ErrScheduleNotFound when absent.
	ScheduleGet(ctx context.Context, p *ScheduleGetParams) (*Schedule, error)
	// ScheduleList lists a namespace's schedules by name; with an empty
	// namespace, every namespace's (for the scheduler).
	ScheduleList(ctx context.Context, p *ScheduleListParams) ([]*Schedule, error)
	// ScheduleUpdate replaces a schedule's spec (workflow, queue, input, cron, time
	// zone, overlap, catch-up window) and moves its cursor to now: the new spec
	// fires from now on. ErrScheduleNotFound when absent.
	ScheduleUpdate(ctx context.Context, p *ScheduleUpdateParams) (*Schedule, error)
	// SchedulePause pauses (Paused true) or resumes a schedule. Pausing a paused
	// schedule is ErrSchedulePaused, resuming an active one ErrScheduleNotPaused,
	// and nothing changes. Resuming moves the cursor to now: ticks due while it was
	// paused are not caught up.
	SchedulePause(ctx context.Context, p *SchedulePauseParams) (*Schedule, error)
	// ScheduleDelete deletes a schedule (its runs stay). ErrScheduleNotFound when
	// absent.
	ScheduleDelete(ctx context.Context, p *ScheduleDeleteParams) error
	// ScheduleFire writes one tick of a schedule in one transaction: it checks
	// the fence (Epoch; a fenced fire of a paused schedule is ErrSchedulePaused
	// and writes nothing), optionally cancels the previous run, creates the run
	// (Run; its ID is deterministic, so a fire retried after an unknown outcome
	// finds its run and creates nothing), and moves the schedule's cursor and
	// buffered tick. See ScheduleFireParams.
	ScheduleFire(ctx context.Context, p *ScheduleFireParams) (*ScheduleFireResult, error)
	// SchedulerLeaseAcquire takes or renews the scheduler lease for Owner. A
	// lease held by Owner with Epoch and unexpired is renewed (same epoch); an
	// expired or absent lease is taken with the next epoch; a lease another owner
	// holds unexpired is not taken (Held false, the holder returned).
	SchedulerLeaseAcquire(ctx context.Context, p *SchedulerLeaseParams) (*SchedulerLease, error)
	// SchedulerLeaseRelease ends the lease now if Owner holds it with Epoch (on
	// graceful stop), so that another scheduler takes over at once.
	SchedulerLeaseRelease(ctx context.Context, p *SchedulerLeaseParams) error
}

// Errors of schedules (ScheduleStore).
var (
	// ErrScheduleNotFound: no schedule has this name in the namespace.
	ErrScheduleNotFound = errors.New("schedule not found")
	// ErrScheduleExists: a schedule with this name exists in the namespace.
	ErrScheduleExists = errors.New("a schedule with this name already exists")
	// ErrSchedulePaused: the schedule is already paused.
	ErrSchedulePaused = errors.New("schedule is already paused")
	// ErrScheduleNotPaused: the schedule is not paused.
	ErrScheduleNotPaused = errors.New("schedule is not paused")
	// ErrNotLeader: the scheduler lease is held by another epoch (or expired);
	// the write was rejected.
	ErrNotLeader = errors.New("not the scheduler leader: stale epoch")
)

// Overlap says what a schedule does at a tick while its previous run is active.
type Overlap string

// Overlap policies.
const (
	// OverlapSkip skips the tick. The default.
	OverlapSkip Overlap = "skip"
	// OverlapBufferOne keeps one tick and starts it once the previous run ends;
	// further ticks meanwhile are skipped.
	OverlapBufferOne Overlap = "buffer_one"
	// OverlapAllowAll starts a run at every tick.
	OverlapAllowAll Overlap = "allow_all"
	// OverlapCancelPrevious cancels the previous run and starts the new one.
	OverlapCancelPrevious Overlap = "cancel_previous"
)

// Valid reports whether o is a defined policy.
func (o Overlap) Valid() bool {
	switch o {
	case OverlapSkip, OverlapBufferOne, OverlapAllowAll, OverlapCancelPrevious:
		return true
	}
	return false
}

// ScheduleSpec is what a schedule does: the part a user writes.
type ScheduleSpec struct {
	Workflow string `json:"workflow"`
	Queue    string `json:"queue"`
	Input    []byte `json:"input,omitempty"`
	// Cron is a cron expression (5 fields, an optional seconds field first, or a
	// descriptor such as @hourly or @every 1s).
	Cron string `json:"cron"`
	// TimeZone is an IANA zone name, e.g. Europe/Berlin; "UTC" by default.
	TimeZone string  `json:"time_zone"`
	Overlap  Overlap `json:"overlap"`
	// CatchupWindow is how late a tick may still fire (after downtime or a
	// change of leader); older ticks are skipped.
	CatchupWindow time.Duration `json:"catchup_window"`
}

// Validate checks the fields the store can check (not the cron expression or
// time zone), wrapping ErrInvalidParams.
func (s *ScheduleSpec) Validate() error {
	for _, f := range []struct{ name, val string }{
		{"Workflow", s.Workflow}, {"Queue", s.Queue}, {"Cron", s.Cron}, {"TimeZone", s.TimeZone},
	} {
		if f.val == "" {
			return fmt.Errorf("%w: %s is required", ErrInvalidParams, f.name)
		}
	}
	if err := ValidateName("workflow", s.Workflow); err != nil {
		return err
	}
	if err := ValidateName("queue", s.Queue); err != nil {
		return err
	}
	if !s.Overlap.Valid() {
		return fmt.Errorf("%w: Overlap: unknown policy %q (skip, buffer_one, allow_all, cancel_previous)", ErrInvalidParams, s.Overlap)
	}
	if s.CatchupWindow <= 0 {
		return fmt.Errorf("%w: CatchupWindow must be positive, not %s", ErrInvalidParams, s.CatchupWindow)
	}
	return nil
}

// Schedule is a stored schedule.
type Schedule struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	ScheduleSpec
	Paused bool `json:"paused"`
	// LastFireAt is the schedule's cursor: ticks up to it are handled (fired,
	// skipped or buffered).
	LastFireAt time.Time `json:"last_fire_at"`
	// LastRunID is the run the schedule started last (empty: none yet).
	LastRunID string `json:"last_run_id,omitempty"`
	// BufferedAt is the tick kept by OverlapBufferOne, if any.
	BufferedAt *time.Time `json:"buffered_at,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
}

// ScheduleCreateParams are the parameters of ScheduleCreate.
type ScheduleCreateParams struct {
	Namespace string       `json:"namespace"`
	Name      string       `json:"name"`
	Spec      ScheduleSpec `json:"spec"`
	Paused    bool         `json:"paused"`
	// Idempotency, when set, records an idempotency key with the change,
	// atomically (see IdempotencyStore); its response renders the *Schedule.
	Idempotency *IdempotencyRecord `json:"-"`
}

// Validate reports the first missing or malformed field of p.
func (p *ScheduleCreateParams) Validate() error {
	if err := validateScheduleRef(p.Namespace, p.Name); err != nil {
		return err
	}
	if err := ValidateName("schedule", p.Name); err != nil {
		return err
	}
	if err := p.Idempotency.Validate(); err != nil {
		return err
	}
	return p.Spec.Validate()
}

// ScheduleDeleteParams are the parameters of ScheduleDelete.
type ScheduleDeleteParams struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Idempotency: as ScheduleCreateParams'; its response renders nil.
	Idempotency *IdempotencyRecord `json:"-"`
}

func validateScheduleRef(namespace, name string) error {
	switch {
	case namespace == "":
		return fmt.Errorf("%w: Namespace is required", ErrInvalidParams)
	case name == "":
		return fmt.Errorf("%w: Name is required", ErrInvalidParams)
	}
	return nil
}

// ScheduleGetParams name a schedule.
type ScheduleGetParams struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// ScheduleListParams are the parameters of ScheduleList.
type ScheduleListParams struct {
	// Namespace filters; empty lists every namespace.
	Namespace string `json:"namespace,omitempty"`
}

// ScheduleUpdateParams are the parameters of ScheduleUpdate.
type ScheduleUpdateParams struct {
	Namespace string       `json:"namespace"`
	Name      string       `json:"name"`
	Spec      ScheduleSpec `json:"spec"`
	// Idempotency: as ScheduleCreateParams'.
	Idempotency *IdempotencyRecord `json:"-"`
}

// Validate reports the first missing or malformed field of p.
func (p *ScheduleUpdateParams) Validate() error {
	if err := validateScheduleRef(p.Namespace, p.Name); err != nil {
		return err
	}
	if err := p.Idempotency.Validate(); err != nil {
		return err
	}
	return p.Spec.Validate()
}

// SchedulePauseParams are the parameters of SchedulePause.
type SchedulePauseParams struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Paused    bool   `json:"paused"`
	// Idempotency: as ScheduleCreateParams'.
	Idempotency *IdempotencyRecord `json:"-"`
}

// ScheduleFireParams are the parameters of ScheduleFire.
type ScheduleFireParams struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Epoch is the scheduler lease's epoch the fire is written under; 0 is a
	// manual fire (trigger, backfill), not fenced and not moving the cursor.
	Epoch int64 `json:"epoch"`
	// Cursor, when set, becomes the schedule's LastFireAt (never moved back).
	Cursor *time.Time `json:"cursor,omitempty"`
	// Run is the run to create (nil: the tick is skipped or buffered). A run
	// with this ID that exists already is returned, Created false.
	Run *RunCreateParams `json:"run,omitempty"`
	// Runs are more runs to create the same way, in order, after Run (a
	// backfill); only with Epoch 0.
	Runs []*RunCreateParams `json:"runs,omitempty"`
	// CancelRunID, when set, is cancelled first (if still active).
	CancelRunID string `json:"cancel_run_id,omitempty"`
	// SetBuffered sets BufferedAt to Buffered (nil clears it).
	SetBuffered bool       `json:"set_buffered,omitempty"`
	Buffered    *time.Time `json:"buffered,omitempty"`
	// Idempotency, when set, records an idempotency key with the fire,
	// atomically; its response renders the *ScheduleFireResult.
	Idempotency *IdempotencyRecord `json:"-"`
}

// AllRuns returns Run (when set) and Runs, in order.
func (p *ScheduleFireParams) AllRuns() []*RunCreateParams {
	if p.Run == nil {
		return p.Runs
	}
	return append([]*RunCreateParams{p.Run}, p.Runs...)
}

// Validate reports the first missing or malformed field of p.
func (p *ScheduleFireParams) Validate() error {
	if err := validateScheduleRef(p.Namespace, p.Name); err != nil {
		return err
	}
	switch {
	case p.Epoch < 0:
		return fmt.Errorf("%w: Epoch is negative", ErrInvalidParams)
	case p.Epoch > 0 && len(p.Runs) > 0:
		return fmt.Errorf("%w: Runs only with Epoch 0", ErrInvalidParams)
	}
	if err := p.Idempotency.Validate(); err != nil {
		return err
	}
	for _, r := range p.AllRuns() {
		if r == nil || r.Claim != nil || len(r.History) > 0 || r.Idempotency != nil {
			return fmt.Errorf("%w: a scheduled run takes no Claim, History or Idempotency", ErrInvalidParams)
		}
		if r.Namespace != p.Namespace {
			return fmt.Errorf("%w: Run.Namespace is not the schedule's", ErrInvalidParams)
		}
		if err := r.Validate(); err != nil {
			return err
		}
	}
	return nil
}

// ScheduleFireResult is the result of ScheduleFire.
type ScheduleFireResult struct {
	// Run is the run of the tick (nil when none was asked for).
	Run *Run `json:"run,omitempty"`
	// Created is false when the run existed already (a retried fire).
	Created bool `json:"created"`
	// Runs are the runs of Runs, in order (created or found).
	Runs []*Run `json:"runs,omitempty"`
	// RunsCreated reports, for each of Runs, whether this fire created it.
	RunsCreated []bool `json:"runs_created,omitempty"`
}

// SchedulerLeaseParams are the parameters of SchedulerLeaseAcquire and
// SchedulerLeaseRelease.
type SchedulerLeaseParams struct {
	Owner string `json:"owner"`
	// Epoch is the epoch Owner holds (0: none).
	Epoch    int64         `json:"epoch"`
	Duration time.Duration `json:"duration"`
}

// Validate reports the first missing or malformed field of p.
func (p *SchedulerLeaseParams) Validate(acquire bool) error {
	switch {
	case p.Owner == "":
		return fmt.Errorf("%w: Owner is required", ErrInvalidParams)
	case p.Epoch < 0:
		return fmt.Errorf("%w: Epoch is negative", ErrInvalidParams)
	case acquire && p.Duration <= 0:
		return fmt.Errorf("%w: Duration must be positive", ErrInvalidParams)
	}
	return nil
}

// SchedulerLease is the state of the scheduler lease.
type SchedulerLease struct {
	Owner     string    `json:"owner"`
	Epoch     int64     `json:"epoch"`
	ExpiresAt time.Time `json:"expires_at"`
	// Held reports that the caller holds it (acquired or renewed).
	Held bool `json:"held"`
}
