package store

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// Workflow retries: a run whose workflow function fails is attempted again.
//
// A run's retry policy is the one it was started with (RunCreateParams.Retry,
// kept as Run.Retry) or, without one, the one the worker's workflow declares,
// sent with the checkpoint that fails the run (CheckpointParams.Retry). The
// store applies it in that checkpoint: when the run's error is retryable
// (RunRetry.Retryable), the policy has attempts left, the run's cancellation
// was not requested and its deadline is not reached by the retry's time, the
// run does not fail. It becomes waiting until the backoff has passed, with a
// wait reason that names the failed attempt; the attempt is appended to the
// run's log (Run.WorkflowAttempts) and Run.WorkflowAttempt counts on. The
// checkpoint's run.failed stream event becomes run.waiting, with the failed
// attempt (RetryingEvent), and CheckpointResult.RetryAt tells the worker.
//
// What runs again: every step op of the run whose recorded outcome is a
// failure is made in progress again (not done, no error, StartedAt the retry's
// time, its attempts kept), so that the next run attempt executes it again,
// numbering its attempts on from the recorded ones. Each such step gets a
// fresh attempt budget: the attempts it had made are recorded in the failed
// run attempt's Steps (PriorAttempts reads them) and do not count against its
// MaxAttempts. Every other op (steps that succeeded, timers, events, children,
// approvals, ...) replays as recorded.

// RunRetry is a workflow retry policy as the store keeps and applies it.
type RunRetry struct {
	// MaxAttempts counts the first attempt: 1 means no retries. At least 1.
	MaxAttempts int `json:"max_attempts"`
	// InitialBackoff is the delay before the first retry; 0 means 1s.
	InitialBackoff Duration `json:"initial_backoff,omitempty"`
	// Factor multiplies the delay after each retry; 0 means 2, at least 1.
	Factor float64 `json:"factor,omitempty"`
	// MaxBackoff caps the delay; 0 means 1m (no delay exceeds it).
	MaxBackoff Duration `json:"max_backoff,omitempty"`
	// Jitter varies each delay by up to ±Jitter (a fraction from 0 to 1).
	Jitter float64 `json:"jitter,omitempty"`
	// NonRetryableTypes lists error types (ErrorInfo.Type) that fail the run
	// at once.
	NonRetryableTypes []string `json:"non_retryable_types,omitempty"`
}

// Defaults of RunRetry's zero fields.
const (
	DefaultRetryInitial = Duration(time.Second)
	DefaultRetryFactor  = 2.0
	DefaultRetryMax     = Duration(time.Minute)
)

// MaxRetryAttempts bounds RunRetry.MaxAttempts: every run attempt is kept in
// the run's row.
const MaxRetryAttempts = 1000

// Validate reports the first bad field of r, wrapping ErrInvalidParams. The
// field names are the JSON ones, as the API shows them.
func (r *RunRetry) Validate() error {
	if r == nil {
		return nil
	}
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: retry."+format, append([]any{ErrInvalidParams}, args...)...)
	}
	switch {
	case r.MaxAttempts < 1 || r.MaxAttempts > MaxRetryAttempts:
		return bad("max_attempts must be from 1 to %d (1: no retries), not %d", MaxRetryAttempts, r.MaxAttempts)
	case r.InitialBackoff < 0:
		return bad("initial_backoff must not be negative, not %s", r.InitialBackoff)
	case r.MaxBackoff < 0:
		return bad("max_backoff must not be negative, not %s", r.MaxBackoff)
	case r.MaxBackoff > 0 && r.InitialBackoff > r.MaxBackoff:
		return bad("initial_backoff %s is above max_backoff %s", r.InitialBackoff, r.MaxBackoff)
	case math.IsNaN(r.Factor) || math.IsInf(r.Factor, 0) || r.Factor != 0 && r.Factor < 1 || r.Factor > 100:
		return bad("factor must be from 1 to 100 (0: 2), not %v", r.Factor)
	case math.IsNaN(r.Jitter) || r.Jitter < 0 || r.Jitter > 1:
		return bad("jitter must be from 0 to 1, not %v", r.Jitter)
	}
	for i, t := range r.NonRetryableTypes {
		if t == "" || len(t) > MaxNameLen {
			return bad("non_retryable_types[%d] must be 1 to %d bytes", i, MaxNameLen)
		}
	}
	return nil
}

// Delay is the backoff before retry n (n = 1 after the first attempt failed).
func (r *RunRetry) Delay(n int) time.Duration {
	initial, factor, maxd := r.InitialBackoff, r.Factor, r.MaxBackoff
	if initial == 0 {
		initial = DefaultRetryInitial
	}
	if factor == 0 {
		factor = DefaultRetryFactor
	}
	if maxd == 0 {
		maxd = max(DefaultRetryMax, initial)
	}
	d := float64(initial) * math.Pow(factor, float64(max(n-1, 0)))
	d = min(d, float64(maxd))
	if r.Jitter > 0 {
		d += d * r.Jitter * (2*rand.Float64() - 1) // retry timing is not replayed
	}
	return time.Duration(max(d, 0))
}

// Retryable reports whether a run that failed with e may be retried by the
// policy: not an error marked non-retryable, not one of NonRetryableTypes, not
// a cancellation, a deadline or a payload over its limit.
func (r *RunRetry) Retryable(e *ErrorInfo) bool {
	if e == nil || e.NonRetryable {
		return false
	}
	switch e.Type {
	case "cancelled", "deadline_exceeded", "payload_too_large", "non_determinism", "step_outcome_unknown":
		// (an at-most-once step whose outcome is unknown is never run again)
		return false
	}
	return !slices.Contains(r.NonRetryableTypes, e.Type)
}

// RunAttempt is one failed attempt of a run (a workflow retry followed it).
type RunAttempt struct {
	// Attempt numbers the run's attempts from 1.
	Attempt int `json:"attempt"`
	// Error is what the workflow function failed with.
	Error ErrorInfo `json:"error"`
	// StartedAt is when the attempt could start: the run's start for the first
	// attempt, the end of the backoff before it for a later one.
	StartedAt time.Time `json:"started_at"`
	// FailedAt is when the checkpoint that failed it was written.
	FailedAt time.Time `json:"failed_at"`
	// RetryAt is when the next attempt became due.
	RetryAt time.Time `json:"retry_at"`
	// Steps are the failed steps the attempt left, each with the attempts it
	// had made: the next attempt runs them again, with a fresh budget.
	Steps []RetriedStep `json:"steps,omitempty"`
}

// RetriedStep is a failed step that a workflow retry runs again.
type RetriedStep struct {
	Position int    `json:"position"`
	Name     string `json:"name"`
	// Attempts is how many attempts the step had made (numbered 1 to Attempts).
	Attempts int `json:"attempts"`
}

// PriorAttempts returns how many attempts of the step at position were made
// in earlier attempts of run r: they do not count against the step's
// MaxAttempts in the current one.
func (r *Run) PriorAttempts(position int) int {
	for i := len(r.WorkflowAttempts) - 1; i >= 0; i-- {
		for _, s := range r.WorkflowAttempts[i].Steps {
			if s.Position == position {
				return s.Attempts
			}
		}
	}
	return 0
}

// RetryState is what a store keeps of a run's workflow retries in one column
// (NULL while it has neither a policy nor a failed attempt): its policy and
// its failed attempts.
type RetryState struct {
	Policy   *RunRetry    `json:"policy,omitempty"`
	Attempts []RunAttempt `json:"attempts,omitempty"`
}

// RetryColumn encodes a new run's retry state: NULL (nil) without a policy.
func RetryColumn(policy *RunRetry) (any, error) {
	if policy == nil {
		return nil, nil
	}
	b, err := json.Marshal(RetryState{Policy: policy})
	if err != nil {
		return nil, fmt.Errorf("encoding retry policy: %w", err)
	}
	return string(b), nil
}

// DecodeRetryState decodes a retry column into run (Retry, WorkflowAttempts)
// and sets its WorkflowAttempt.
func DecodeRetryState(text string, valid bool, run *Run) error {
	run.WorkflowAttempt = 1
	if !valid || text == "" {
		return nil
	}
	var st RetryState
	if err := json.Unmarshal([]byte(text), &st); err != nil {
		return fmt.Errorf("decoding retry state: %w", err)
	}
	run.Retry, run.WorkflowAttempts = st.Policy, st.Attempts
	run.WorkflowAttempt = len(st.Attempts) + 1
	return nil
}

// RetryRow is what a store reads of a run to decide on a workflow retry.
type RetryRow struct {
	State     RetryState
	StartedAt time.Time
	Deadline  *time.Time
	Cancel    bool
}

// RetryPlan is a workflow retry a failing checkpoint turns into.
type RetryPlan struct {
	// Checkpoint is the checkpoint to write instead: the run waits until the
	// retry (its WakeAt), with the original's history, and run.waiting in
	// place of run.failed.
	Checkpoint *CheckpointParams
	// Attempt is the failed attempt, to append to the run's log with the
	// steps that are reset (their Steps are filled by the store).
	Attempt RunAttempt
	// State is the run's retry state with Attempt appended (Steps to fill).
	State RetryState
}

// PlanRetry decides whether checkpoint p, which fails its run, becomes a
// workflow retry, given the run as row holds it and the store's clock now;
// nil when the run fails.
func PlanRetry(p *CheckpointParams, row *RetryRow, now time.Time) *RetryPlan {
	if p.Status != StatusFailed || row.Cancel {
		return nil
	}
	policy := row.State.Policy
	if policy == nil {
		policy = p.Retry
	}
	attempt := len(row.State.Attempts) + 1
	if policy == nil || attempt >= policy.MaxAttempts || !policy.Retryable(p.Error) {
		return nil
	}
	retryAt := now.Add(policy.Delay(attempt))
	if row.Deadline != nil && !retryAt.Before(*row.Deadline) {
		return nil
	}
	started := row.StartedAt
	if n := len(row.State.Attempts); n > 0 {
		started = row.State.Attempts[n-1].RetryAt
	}
	a := RunAttempt{Attempt: attempt, Error: *p.Error, StartedAt: started.UTC(), FailedAt: now.UTC(), RetryAt: retryAt.UTC()}
	ck := *p
	ck.Status, ck.Error, ck.Output, ck.Retry = StatusWaiting, nil, nil, nil
	ck.WakeAt = &a.RetryAt
	ck.WaitReason = fmt.Sprintf("workflow retry: attempt %d failed at %s (%s); attempt %d at %s",
		attempt, a.FailedAt.Format(time.RFC3339), clip(p.Error.Message, 200), attempt+1, a.RetryAt.Format(time.RFC3339))
	ck.Stream = make([]StreamWrite, 0, len(p.Stream))
	for _, w := range p.Stream {
		if w.Name == StreamRunFailed {
			w = RetryingEvent(&a, ck.WaitReason)
		}
		ck.Stream = append(ck.Stream, w)
	}
	st := RetryState{Policy: row.State.Policy, Attempts: append(slices.Clip(row.State.Attempts), a)}
	return &RetryPlan{Checkpoint: &ck, Attempt: a, State: st}
}

// SetSteps records the steps a retry resets in its failed attempt.
func (rp *RetryPlan) SetSteps(steps []RetriedStep) {
	slices.SortFunc(steps, func(a, b RetriedStep) int { return a.Position - b.Position })
	rp.Attempt.Steps = steps
	rp.State.Attempts[len(rp.State.Attempts)-1].Steps = steps
}

// Column encodes the plan's retry state for the run's retry column.
func (rp *RetryPlan) Column() (string, error) {
	b, err := json.Marshal(rp.State)
	if err != nil {
		return "", fmt.Errorf("encoding retry state: %w", err)
	}
	return string(b), nil
}

// Result is the checkpoint's result for a retry written with result res.
func (rp *RetryPlan) Result(res *CheckpointResult) *CheckpointResult {
	if res != nil {
		at := rp.Attempt.RetryAt
		res.RetryAt = &at
	}
	return res
}

// RetryingEvent is the stream event of failed attempt a, which a workflow
// retry follows: run.waiting, as for any wait, with the wait's reason and
// wake_at, and the failed attempt's number and error (retry).
func RetryingEvent(a *RunAttempt, reason string) StreamWrite {
	type retry struct {
		Attempt int        `json:"attempt"`
		Error   *ErrorInfo `json:"error"`
	}
	b, _ := json.Marshal(struct {
		Reason string    `json:"reason"`
		WakeAt time.Time `json:"wake_at"`
		Retry  retry     `json:"retry"`
	}{reason, a.RetryAt, retry{a.Attempt, &a.Error}})
	return StreamWrite{Name: StreamRunWaiting, Data: b}
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xc0 == 0x80 { // not inside a UTF-8 sequence
		n--
	}
	return s[:n] + "…"
}
