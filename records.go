package trellis

import (
	"time"

	"github.com/trellis-dev/trellis/store"
)

// The records a client returns: runs, history ops, approval requests. They are
// chosen for users, not copied from storage rows, and their JSON form is the wire
// format of the HTTP API and of `trellis ... --json`: snake_case names, times in
// RFC 3339, payloads as JSON values (see Payload, in history.go).

// Status is the state of a run; see docs/states.md.
type Status string

// Run states.
const (
	StatusPending   Status = "pending"
	StatusRunning   Status = "running"
	StatusWaiting   Status = "waiting"
	StatusBlocked   Status = "blocked"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
)

// Terminal reports whether s is a final state.
func (s Status) Terminal() bool { return store.Status(s).Terminal() }

// Valid reports whether s is one of the run states.
func (s Status) Valid() bool { return store.Status(s).Valid() }

// ReusePolicy decides what a start does when its workflow ID is already used.
type ReusePolicy string

// Reuse policies for StartOptions.Reuse.
const (
	// ReuseRejectActive (the default) rejects a start while a run with the same
	// workflow ID is active, and allows it once that run finished.
	ReuseRejectActive ReusePolicy = ""
	// ReuseReject rejects a start if any run with the workflow ID ever existed.
	ReuseReject ReusePolicy = "reject"
	// ReuseReturnExisting returns the latest run with the workflow ID instead.
	ReuseReturnExisting ReusePolicy = "return_existing"
)

// ErrorInfo is an error as recorded: its message, a type that names its kind
// (an engine code such as "step_timeout", or the Go type of the user's error),
// and whether it was final.
type ErrorInfo struct {
	Message      string `json:"message"`
	Type         string `json:"type,omitempty"`
	NonRetryable bool   `json:"non_retryable,omitempty"`
}

// Run is one execution of a workflow.
type Run struct {
	Namespace  string `json:"namespace"`
	ID         string `json:"id"`
	WorkflowID string `json:"workflow_id"`
	Workflow   string `json:"workflow"`
	Queue      string `json:"queue"`
	Priority   int    `json:"priority"`
	Status     Status `json:"status"`
	// Version is the workflow version the run started with.
	Version int `json:"version"`
	// Pinned: the run was started with StartOptions.Version, and only a
	// worker that serves that version of the workflow runs it
	// (WorkflowOptions.Version and AlsoServes).
	Pinned bool       `json:"pinned,omitempty"`
	Input  Payload    `json:"input,omitempty"`
	Output Payload    `json:"output,omitempty"`
	Error  *ErrorInfo `json:"error,omitempty"`
	// WaitReason says why a pending, waiting or blocked run is not running.
	WaitReason      string     `json:"wait_reason,omitempty"`
	CancelRequested bool       `json:"cancel_requested,omitempty"`
	Deadline        *time.Time `json:"deadline,omitempty"`
	// AvailableAt is when a pending or waiting run is (or was) due.
	AvailableAt time.Time `json:"available_at"`
	// Attempts counts the times a worker took the run (claims).
	Attempts int `json:"attempts"`
	// WorkflowAttempt numbers the run's attempt of its workflow function: 1,
	// and one more after each failed attempt a workflow retry followed (see
	// docs/workflow-retries.md). Unlike Attempts, waits, crashes and
	// hand-backs do not count.
	WorkflowAttempt int `json:"workflow_attempt"`
	// WorkflowAttempts lists the run's failed attempts that a retry followed,
	// oldest first, each with its error and times.
	WorkflowAttempts []RunAttempt `json:"workflow_attempts,omitempty"`
	// Retry is the workflow retry policy the run was started with
	// (StartOptions.Retry, or retry in the API); nil when it takes its
	// workflow's.
	Retry *RunRetry `json:"retry,omitempty"`
	// LeaseOwner is the worker that holds a running run, until LeaseExpiresAt.
	LeaseOwner     string     `json:"lease_owner,omitempty"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	StartedAt      *time.Time `json:"started_at,omitempty"`
	UpdatedAt      time.Time  `json:"updated_at"`
	FinishedAt     *time.Time `json:"finished_at,omitempty"`
	// ParentID is the run ID of the parent of a child run.
	ParentID string `json:"parent_id,omitempty"`
	// CurrentStep is the step a running run is executing, as its worker's lease
	// heartbeat last reported it (Worker.HeartbeatInterval): it may trail the
	// run by up to that interval. Nil when the run is not running or was between
	// steps at the last heartbeat.
	CurrentStep *CurrentStep `json:"current_step,omitempty"`
}

type (
	// RunRetry is a workflow retry policy as a run keeps it (Run.Retry) and
	// the API takes it (retry in a start): see docs/workflow-retries.md.
	RunRetry = store.RunRetry
	// RunAttempt is a failed attempt of a run that a workflow retry followed.
	RunAttempt = store.RunAttempt
	// RetriedStep is a failed step that a workflow retry runs again.
	RetriedStep = store.RetriedStep
)

// CurrentStep is a step attempt in progress.
type CurrentStep struct {
	Name    string    `json:"name"`
	Attempt int       `json:"attempt"`
	Since   time.Time `json:"since"`
	// Position is the step's position in the run's history.
	Position int `json:"position"`
}

// RunPage is one page of Client.List.
type RunPage struct {
	Runs []*Run `json:"runs"`
	// NextCursor continues the listing (ListOptions.Cursor); empty on the last page.
	NextCursor string `json:"next_page_token,omitempty"`
}

// OpKind names the kind of an op in a run's history.
type OpKind string

// Op kinds; docs/storage.md describes what each records.
const (
	OpStep     OpKind = "step"
	OpNow      OpKind = "now"
	OpUUID     OpKind = "uuid"
	OpRandom   OpKind = "random"
	OpPatch    OpKind = "patch"
	OpSet      OpKind = "set"
	OpDelete   OpKind = "delete"
	OpTimer    OpKind = "timer"
	OpEvent    OpKind = "event"
	OpApproval OpKind = "approval"
	OpChild    OpKind = "child"
	OpSelect   OpKind = "select"
	OpEmit     OpKind = "emit"
)

// Op is one entry of a run's history.
type Op struct {
	Position int    `json:"position"`
	Kind     OpKind `json:"kind"`
	Name     string `json:"name"`
	// Done is false for an op still under way (a step being retried, a wait).
	Done   bool       `json:"done"`
	Result Payload    `json:"result,omitempty"`
	Error  *ErrorInfo `json:"error,omitempty"`
	// Attempts counts a step's attempts.
	Attempts int `json:"attempts"`
	// AttemptLog lists the attempts of a step that did not complete it
	// (failed, lost, timed out: Attempt.Outcome), oldest first.
	AttemptLog []Attempt  `json:"attempt_log,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// AttemptStartedAt is when the attempt that completed a step began, for a
	// step that failed attempts before it (StartedAt is its first attempt's
	// start); nil otherwise, and in histories recorded before it existed.
	AttemptStartedAt *time.Time `json:"attempt_started_at,omitempty"`
}

// Attempt is one attempt of a step that did not complete it.
type Attempt struct {
	Attempt    int       `json:"attempt"`
	Error      ErrorInfo `json:"error"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// Outcome says how it ended: AttemptFailed (its function returned an
	// error, panicked or ran out of time, as its worker recorded),
	// AttemptLost (its worker's lease expired while it ran: the worker died
	// or was cut off, and nothing was reported), AttemptTimedOut (it ran past
	// its timeout plus a grace and the store or server ended its lease), or
	// AttemptStarted (a record of an attempt's start, while it runs). Empty
	// in histories exported before outcomes existed: failed.
	Outcome string `json:"outcome,omitempty"`
}

// Outcomes of a step attempt (Attempt.Outcome). A lost or timed-out attempt
// counts against the step's MaxAttempts as a failed one does; the next
// attempt starts when another worker claims the run, without the backoff.
const (
	AttemptFailed   = store.AttemptFailed
	AttemptLost     = store.AttemptLost
	AttemptTimedOut = store.AttemptTimedOut
	AttemptStarted  = store.AttemptStarted
)

// ApprovalStatus is the state of an approval request.
type ApprovalStatus string

// Approval statuses.
const (
	ApprovalPending  ApprovalStatus = "pending"
	ApprovalApproved ApprovalStatus = "approved"
	ApprovalRejected ApprovalStatus = "rejected"
	ApprovalExpired  ApprovalStatus = "expired"
)

// ApprovalRecord is an approval request and, once decided, its decision.
type ApprovalRecord struct {
	Namespace string `json:"namespace"`
	ID        string `json:"id"`
	RunID     string `json:"run_id"`
	Workflow  string `json:"workflow"`
	// Name is the name the workflow gave the request (RequestApproval).
	Name      string         `json:"name"`
	Approvers []string       `json:"approvers,omitempty"`
	Subject   string         `json:"subject,omitempty"`
	Details   Payload        `json:"details,omitempty"`
	Status    ApprovalStatus `json:"status"`
	// Principal and Comment are the decider's, once decided.
	Principal string     `json:"principal,omitempty"`
	Comment   string     `json:"comment,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	DecidedAt *time.Time `json:"decided_at,omitempty"`
}

// ApprovalList is one page of Client.Approvals.
type ApprovalList struct {
	Approvals []*ApprovalRecord `json:"approvals"`
	// NextCursor continues the listing (ApprovalFilter.Cursor); empty on the last page.
	NextCursor string `json:"next_page_token,omitempty"`
}

func errorFromStore(e *store.ErrorInfo) *ErrorInfo {
	if e == nil {
		return nil
	}
	return &ErrorInfo{Message: e.Message, Type: e.Type, NonRetryable: e.NonRetryable}
}

func runFromStore(r *store.Run) *Run {
	if r == nil {
		return nil
	}
	return &Run{
		Namespace: r.Namespace, ID: r.ID, WorkflowID: r.WorkflowID, Workflow: r.Workflow, Queue: r.Queue,
		Priority: r.Priority, Status: Status(r.Status), Version: r.Version, Pinned: r.Pinned, Input: r.Input, Output: r.Output,
		Error: errorFromStore(r.Error), WaitReason: r.WaitReason, CancelRequested: r.CancelRequested,
		Deadline: r.Deadline, AvailableAt: r.AvailableAt, Attempts: r.Attempts, LeaseOwner: r.LeaseOwner,
		LeaseExpiresAt: r.LeaseExpiresAt, CreatedAt: r.CreatedAt, StartedAt: r.StartedAt,
		UpdatedAt: r.UpdatedAt, FinishedAt: r.FinishedAt, ParentID: r.ParentID,
		CurrentStep:     currentStepFromStore(r.CurrentStep),
		WorkflowAttempt: max(r.WorkflowAttempt, 1), WorkflowAttempts: r.WorkflowAttempts, Retry: r.Retry,
	}
}

func currentStepFromStore(s *store.RunStep) *CurrentStep {
	if s == nil {
		return nil
	}
	return &CurrentStep{Name: s.Name, Attempt: s.Attempt, Since: s.Since, Position: s.Position}
}

func runsFromStore(rs []*store.Run) []*Run {
	out := make([]*Run, len(rs))
	for i, r := range rs {
		out[i] = runFromStore(r)
	}
	return out
}

func opsFromStore(ops []*store.Op) []*Op {
	out := make([]*Op, len(ops))
	for i, o := range ops {
		op := &Op{Position: o.Position, Kind: OpKind(o.Kind), Name: o.Name, Done: o.Done, Result: o.Result,
			Error: errorFromStore(o.Error), Attempts: o.Attempts, StartedAt: o.StartedAt, FinishedAt: o.FinishedAt,
			AttemptStartedAt: o.AttemptStartedAt}
		for _, a := range o.AttemptLog {
			op.AttemptLog = append(op.AttemptLog, Attempt{Attempt: a.Attempt, Error: *errorFromStore(&a.Error),
				StartedAt: a.StartedAt, FinishedAt: a.FinishedAt, Outcome: a.Outcome})
		}
		out[i] = op
	}
	return out
}

func approvalFromStore(a *store.Approval) *ApprovalRecord {
	return &ApprovalRecord{
		Namespace: a.Namespace, ID: a.ID, RunID: a.RunID, Workflow: a.Workflow, Name: a.Name,
		Approvers: a.Approvers, Subject: a.Subject, Details: a.Details, Status: ApprovalStatus(a.Status),
		Principal: a.Principal, Comment: a.Comment, CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt, DecidedAt: a.DecidedAt,
	}
}

func statusesToStore(ss []Status) []store.Status {
	out := make([]store.Status, len(ss))
	for i, s := range ss {
		out[i] = store.Status(s)
	}
	return out
}
