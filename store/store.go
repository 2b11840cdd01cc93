// Package store defines the storage contract of Trellis: the durable operations a
// worker and a client need (start a run, claim runs, checkpoint, extend leases, cancel,
// list, read history), each one atomic.
//
// The contract is cut into roles that a server authorizes separately: WorkerStore
// (what a worker executing runs needs), RunStore (starting, inspecting, cancelling
// and resuming runs), EventStore (sending events), ApprovalStore (listing and
// deciding approvals) and AdminStore (the store's lifecycle). Store embeds them all.
// A method that two roles need (HistoryList, RunChildren, Subscribe) is in both.
//
// The drivers storesqlite and storepg implement Store and pass the shared
// conformance suite in package storetest; the remote worker client
// (storeremote, over a server's worker protocol) implements the worker role
// and WorkerRegistry and passes the suite's cases through
// storetest.WithWorker. The
// contract never exposes a transaction: a driver may batch many calls into one
// transaction (group commit), but each call succeeds or fails on its own. The SQL
// drivers add optional transactional capabilities (see tx.go).
//
// Times are supplied by the driver's clock; callers never pass "now".
package store

import (
	"context"
	"slices"
	"time"
)

// Store is the whole storage contract: every role. All methods are safe for
// concurrent use.
type Store interface {
	WorkerStore
	RunStore
	EventStore
	ApprovalStore
	AdminStore
	ScheduleStore
}

// WorkerStore is what a worker needs to execute runs: claim them, hold and hand
// back their leases, checkpoint them, read the history and child runs of a run it
// replays, resume blocked runs of the workflows it serves, and be woken up.
type WorkerStore interface {
	// RunsClaim claims up to Max due runs for a worker, in claim order
	// (priority DESC, available_at ASC, sequence ASC, id ASC), giving each a fresh
	// lease token, and returns them with their history. Runs whose lease expired
	// and waiting runs whose time has come are due.
	RunsClaim(ctx context.Context, p *RunsClaimParams) (*RunsClaimResult, error)
	// LeasesExtend extends the leases a worker holds (heartbeat). Leases whose
	// token no longer matches are reported lost; runs with a pending cancellation
	// are reported so the worker can stop them.
	LeasesExtend(ctx context.Context, p *LeasesExtendParams) (*LeasesExtendResult, error)
	// LeaseRelease hands a run back (pending, available now) without recording
	// anything else, e.g. on worker shutdown. ErrLeaseLost on a stale token.
	LeaseRelease(ctx context.Context, p *LeaseReleaseParams) error
	// Checkpoint atomically saves ops, attempts, run-store writes and the run's new
	// state, fenced by the lease token: on a stale token it returns ErrLeaseLost and
	// writes nothing. When the run's cancellation was requested (the result's
	// CancelRequested), a checkpoint to waiting makes the run pending and due now
	// instead (signalling TopicReady) so that a worker claims it and ends it; one to
	// blocked ends it cancelled at once; children the checkpoint starts are
	// cancelled as RunCancel cancels them.
	Checkpoint(ctx context.Context, p *CheckpointParams) (*CheckpointResult, error)
	// RunsResumeBlocked makes pending every blocked run of the given workflows;
	// a worker calls it at start. It returns how many runs it resumed.
	RunsResumeBlocked(ctx context.Context, p *RunsResumeBlockedParams) (int, error)
	// HistoryList returns a run's ops in position order with their failed attempts.
	HistoryList(ctx context.Context, p *HistoryListParams) ([]*Op, error)
	// RunChildren returns the child runs one op of a parent started, in item order
	// (none when that op started no group). ErrRunNotFound for an unknown parent.
	RunChildren(ctx context.Context, p *RunChildrenParams) ([]*Run, error)
	Subscriber
}

// RunStore starts, inspects, cancels and resumes runs: what a client holding no
// workflow code needs.
type RunStore interface {
	// RunCreate durably creates a run (status pending), applying the reuse policy
	// for its workflow ID. It returns ErrRunExists when the policy rejects the start.
	RunCreate(ctx context.Context, p *RunCreateParams) (*RunCreateResult, error)
	// RunGet returns one run by reference: a run ID, or else the latest run with
	// that workflow ID. ErrRunNotFound when neither matches.
	RunGet(ctx context.Context, p *RunGetParams) (*Run, error)
	// RunsGet returns many runs by run ID in one read (see runsget.go).
	RunsGet(ctx context.Context, p *RunsGetParams) ([]*Run, error)
	// RunList lists runs newest first, with filters and cursor pagination.
	RunList(ctx context.Context, p *RunListParams) (*RunListResult, error)
	// RunCancel requests cancellation. A run that never started ends cancelled at
	// once; a waiting or pending run that has history is made pending so a worker
	// can observe the cancellation and run cleanup; a running run is flagged and its
	// worker learns it at its next checkpoint or lease extension (and a checkpoint
	// that would make it wait hands it back instead, see Checkpoint). Cancelling a
	// finished run returns ErrRunFinished. The active children of the run's
	// non-detached child groups are cancelled too, recursively, in the same
	// transaction (held children end cancelled at once).
	RunCancel(ctx context.Context, p *RunCancelParams) (*Run, error)
	// RunResume makes a blocked run pending again (after a fixed deploy).
	// ErrRunNotBlocked when the run is not blocked.
	RunResume(ctx context.Context, p *RunResumeParams) (*Run, error)
	// HistoryList returns a run's ops in position order with their failed attempts.
	HistoryList(ctx context.Context, p *HistoryListParams) ([]*Op, error)
	// RunChildren returns the child runs one op of a parent started, in item order
	// (none when that op started no group). ErrRunNotFound for an unknown parent.
	RunChildren(ctx context.Context, p *RunChildrenParams) ([]*Run, error)
	// KVGet reads one value of a run's store. ErrKeyNotFound when absent.
	KVGet(ctx context.Context, p *KVGetParams) ([]byte, error)
	// StreamRead reads the events of a run's stream after a sequence, in order
	// (see stream.go); StreamTopic signals new ones. ErrRunNotFound for an
	// unknown run.
	StreamRead(ctx context.Context, p *StreamReadParams) (*StreamReadResult, error)
	// BatchCreator: RunsCreate, many runs in one transaction (see batch.go).
	BatchCreator
	Subscriber
}

// EventStore sends events to runs: what a producer in another service needs.
type EventStore interface {
	// EventSend durably adds an event to a run's inbox (see waiting.go). A run
	// waiting for an event of that name becomes pending at once. ErrRunNotFound
	// for an unknown run, ErrRunFinished for a finished one.
	EventSend(ctx context.Context, p *EventSendParams) (*EventSendResult, error)
}

// ApprovalStore lists and decides approval requests: what an approver needs.
type ApprovalStore interface {
	// ApprovalGet returns one approval request. ErrApprovalNotFound when absent.
	ApprovalGet(ctx context.Context, p *ApprovalGetParams) (*Approval, error)
	// ApprovalList lists approval requests, newest first, with filters and cursor
	// pagination.
	ApprovalList(ctx context.Context, p *ApprovalListParams) (*ApprovalListResult, error)
	// ApprovalDecide approves or rejects a pending approval request and adds the
	// decision to its run's inbox as an event named ApprovalEvent(id), waking the
	// run. ErrApprovalNotFound, or ErrApprovalDecided when it is no longer
	// pending (decided, or at or past its ExpiresAt by the store's clock);
	// ErrRunFinished when its run has finished. Nothing is written on error.
	ApprovalDecide(ctx context.Context, p *ApprovalDecideParams) (*Approval, error)
}

// AdminStore is the store's lifecycle: what only its owner may do. Retention and
// other maintenance of the whole store belong here.
type AdminStore interface {
	// Close releases the store's resources. It is idempotent; calls made after it
	// fail with ErrClosed.
	Close() error

	// WorkerRegistry: workers' records (see workers.go).
	WorkerRegistry
	// TokenStore: the server's bearer tokens (see tokens.go).
	TokenStore
	// KeyStore: the secret keys the servers of the store share (see keys.go).
	KeyStore
	// AuditStore: the audit log of the server's state changes (see audit.go).
	AuditStore
	// IdempotencyStore: idempotency keys of mutating calls (see idempotency.go).
	IdempotencyStore
	// SessionStore: the web UI's sessions ended before their expiry (see
	// sessions.go).
	SessionStore
	// QueueStore: namespaces and queues as objects (see queues.go).
	QueueStore
	// RunDeleter: deleting finished runs, one now or expired ones in batches
	// (retention, see batch.go).
	RunDeleter
}

// Subscriber delivers wake-ups: signals after committed changes.
type Subscriber interface {
	// Subscribe returns a channel that receives a (coalesced) signal after each
	// committed change on topic, and a function that ends the subscription; the
	// subscription also ends when ctx ends. Topics are TopicReady and
	// RunTopic(namespace, runID) and StreamTopic(namespace, runID). It fails with ctx's error when ctx has ended,
	// with ErrClosed on a closed store, and, for a store that subscribes over a
	// network, when it cannot.
	Subscribe(ctx context.Context, topic string) (<-chan struct{}, func(), error)
}

// TopicReady is signalled when runs may have become claimable (a run was created,
// released, resumed, woken or cancelled).
const TopicReady = "ready"

// TopicCancel is signalled after a cancellation is requested of a run that
// started: the workers holding runs extend their leases at once, which reports
// the cancellation, instead of waiting for their next heartbeat. (Across
// processes it reaches them where the store pushes: Postgres' NOTIFY; on SQLite a
// worker in another process learns it at its next heartbeat.)
const TopicCancel = "cancel"

// RunTopic is signalled after every committed change of one run's status except a
// claim (pending → running: nobody waits for it), and after a cancellation request.
func RunTopic(namespace, runID string) string { return RunTopicPrefix(namespace) + runID }

// Status is the state of a run. See docs/states.md.
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
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusCancelled
}

// Valid reports whether s is one of the defined states.
func (s Status) Valid() bool {
	switch s {
	case StatusPending, StatusRunning, StatusWaiting, StatusBlocked,
		StatusSucceeded, StatusFailed, StatusCancelled:
		return true
	}
	return false
}

// ErrorInfo is an error as recorded in the store.
type ErrorInfo struct {
	// Message is the error text.
	Message string `json:"message"`
	// Type is the Go type or a code naming the error's kind, e.g. "deadline_exceeded".
	Type string `json:"type,omitempty"`
	// NonRetryable is set when the error must not be retried.
	NonRetryable bool `json:"non_retryable,omitempty"`
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
	// Version is the workflow version the run was started with; the run keeps it.
	Version int `json:"version"`
	// Pinned: only a worker that serves Version of the workflow claims the run
	// (RunsClaimParams.Versions). A run that is not pinned goes to any worker
	// of its workflow, whatever its version.
	Pinned bool `json:"pinned,omitempty"`
	// Sequence is the run's global creation order.
	Sequence int64      `json:"sequence"`
	Input    []byte     `json:"input,omitempty"`
	Output   []byte     `json:"output,omitempty"`
	Error    *ErrorInfo `json:"error,omitempty"`
	// WaitReason says why a waiting or blocked run waits.
	WaitReason      string     `json:"wait_reason,omitempty"`
	CancelRequested bool       `json:"cancel_requested,omitempty"`
	Deadline        *time.Time `json:"deadline,omitempty"`
	AvailableAt     time.Time  `json:"available_at"`
	// Attempts counts how many times the run was claimed.
	Attempts int `json:"attempts"`
	// WorkflowAttempt numbers the run's attempt of its workflow function
	// (workflow retries, see retry.go): 1, then one more after each failed
	// attempt that a retry followed. Stores set it; 0 reads as 1.
	WorkflowAttempt int `json:"workflow_attempt,omitempty"`
	// WorkflowAttempts lists the run's failed attempts, oldest first.
	WorkflowAttempts []RunAttempt `json:"workflow_attempts,omitempty"`
	// Retry is the workflow retry policy the run was started with, if any.
	Retry          *RunRetry  `json:"retry,omitempty"`
	LeaseOwner     string     `json:"lease_owner,omitempty"`
	LeaseExpiresAt *time.Time `json:"lease_expires_at,omitempty"`
	CreatedAt      time.Time  `json:"created_at"`
	StartedAt      *time.Time `json:"started_at,omitempty"`
	// UpdatedAt is when the run's record last changed: created, claimed, status
	// changed by a checkpoint, cancellation requested. A checkpoint that keeps the
	// run running may leave it as it was (SQLite does; Postgres sets it).
	UpdatedAt  time.Time  `json:"updated_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// ParentID is the run ID of the parent of a child run.
	ParentID string `json:"parent_id,omitempty"`
	// TraceParent is the W3C trace context of the call that started the run
	// (RunCreateParams.TraceParent); empty when it carried none.
	TraceParent string `json:"trace_parent,omitempty"`
	// CurrentStep is the step a running run is executing, as its worker last
	// reported with the lease heartbeat (LeasesExtendParams.Steps): nil when the
	// run is not running, or its worker reported no step running at its last
	// heartbeat of this lease. It may trail the run by up to a heartbeat interval.
	CurrentStep *RunStep `json:"current_step,omitempty"`
}

// RunStep is a step attempt in progress.
type RunStep struct {
	Name    string    `json:"name"`
	Attempt int       `json:"attempt"`
	Since   time.Time `json:"since"`
	// Position is the step's op position in the run's history. A claim that
	// takes the run after its lease expired records the attempt the lease's
	// last heartbeat reported (Position, Attempt) as lost or timed out
	// (AttemptLost, AttemptTimedOut) unless it completed.
	Position int `json:"position"`
	// Timeout is the attempt's declared timeout (0: none). The store ends a
	// lease whose step ran past Since + Timeout + a grace
	// (LeasesExtendParams.StepTimeoutGrace) and records the attempt timed out.
	Timeout time.Duration `json:"timeout,omitempty"`
}

// OpKind names the kind of an operation in history.
type OpKind string

// Operation kinds.
const (
	OpStep   OpKind = "step"
	OpNow    OpKind = "now"
	OpUUID   OpKind = "uuid"
	OpRandom OpKind = "random"
	OpPatch  OpKind = "patch"
	OpSet    OpKind = "set"
	OpDelete OpKind = "delete"
	// OpTimer records a durable timer: Result is its due time (JSON).
	OpTimer OpKind = "timer"
	// OpEvent records an event received (Result is its payload) or a wait for one
	// that timed out (Error).
	OpEvent OpKind = "event"
	// OpApproval records an approval request and, once done, its decision.
	OpApproval OpKind = "approval"
	// OpChild records child runs started (one, or a Map's group); done once they
	// finished.
	OpChild OpKind = "child"
	// OpSelect records which case of a select won (Result is its index).
	OpSelect OpKind = "select"
	// OpEmit records an event published to the run's stream (trellis.Emit), so
	// that a replay does not publish it again.
	OpEmit OpKind = "emit"
)

// Op is one entry of a run's history.
type Op struct {
	Position int    `json:"position"`
	Kind     OpKind `json:"kind"`
	Name     string `json:"name"`
	// Done is false for a step still being retried (its failed attempts are saved).
	Done     bool       `json:"done"`
	Result   []byte     `json:"result,omitempty"`
	Error    *ErrorInfo `json:"error,omitempty"`
	Attempts int        `json:"attempts"`
	// AttemptLog lists failed attempts, oldest first (filled by HistoryList and
	// RunsClaim).
	AttemptLog []Attempt  `json:"attempt_log,omitempty"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
	// AttemptStartedAt is when the attempt that completed a step began, for a
	// step that failed attempts before it (nil otherwise: StartedAt is then that
	// attempt's start). It is stored as the step's attempt row numbered Attempts
	// with an empty error (SucceededAttempt), which readers take out of the
	// AttemptLog (TakeSucceededAttempt).
	AttemptStartedAt *time.Time `json:"attempt_started_at,omitempty"`
}

// SucceededAttempt is the attempt row that records op's AttemptStartedAt; ok is
// false when op has none. Stores write it with the op
// (CheckpointParams.AttemptRows, also for RunCreateParams.SeedCheckpoint).
func (op *Op) SucceededAttempt() (a Attempt, ok bool) {
	if op.AttemptStartedAt == nil || op.FinishedAt == nil || !op.Done || op.Error != nil {
		return Attempt{}, false
	}
	return Attempt{Position: op.Position, Attempt: op.Attempts, StartedAt: *op.AttemptStartedAt, FinishedAt: *op.FinishedAt}, true
}

// TakeSucceededAttempt moves the row SucceededAttempt wrote out of op's
// AttemptLog into AttemptStartedAt: the last row of a step that completed
// without an error, numbered as its last attempt, is that attempt's (its failed
// attempts precede it). A reader calls it once it has filled the AttemptLog.
func (op *Op) TakeSucceededAttempt() {
	n := len(op.AttemptLog)
	if n == 0 || !op.Done || op.Error != nil || op.AttemptLog[n-1].Attempt != op.Attempts ||
		op.AttemptLog[n-1].Outcome != "" {
		return
	}
	at := op.AttemptLog[n-1].StartedAt
	op.AttemptStartedAt = &at
	op.AttemptLog = op.AttemptLog[:n-1]
	if n == 1 {
		op.AttemptLog = nil
	}
}

// Attempt is one attempt of a step that did not complete it (failed, lost,
// timed out, or started and not yet ended: see Outcome), or (with an empty
// Error and Outcome) the attempt that completed a step after other attempts
// (Op.SucceededAttempt). Stores keep one row per (run, position, attempt): a
// write of an attempt that has a row replaces it (a started row by the
// attempt's end).
type Attempt struct {
	Position   int       `json:"position"`
	Attempt    int       `json:"attempt"`
	Error      ErrorInfo `json:"error"`
	StartedAt  time.Time `json:"started_at"`
	FinishedAt time.Time `json:"finished_at"`
	// Outcome says how the attempt ended: AttemptFailed, AttemptLost,
	// AttemptTimedOut, or AttemptStarted while it runs. Empty for the row of
	// an attempt that completed its step. Readers report AttemptFailed for a
	// row with an error and no outcome (rows written before outcomes were).
	Outcome string `json:"outcome,omitempty"`
}

// Outcomes of a step attempt (Attempt.Outcome).
const (
	// AttemptFailed: the step's function returned an error (or panicked, or
	// its worker ended it at its timeout), and the worker recorded it.
	AttemptFailed = "failed"
	// AttemptLost: the attempt started (its worker's lease heartbeat reported
	// it running), then the lease expired with nothing reported: the worker
	// died or was cut off. Recorded by the claim that takes the run next.
	AttemptLost = "lost"
	// AttemptTimedOut: the store (or the server) ended the attempt because its
	// declared timeout plus a grace passed while it still ran
	// (RunStep.Timeout). Recorded by the claim that takes the run next.
	AttemptTimedOut = "timed_out"
	// AttemptStarted is a durable record that an attempt began, written before
	// the step's function runs (at-most-once steps), and replaced by the
	// attempt's real outcome when it ends.
	AttemptStarted = "started"
)

// DefaultStepTimeoutGrace is the grace a store gives a step attempt past its
// declared timeout (RunStep.Timeout) before it ends the attempt's lease
// (LeasesExtendParams.StepTimeoutGrace, RunsClaimParams.StepTimeoutGrace when
// 0). The lease owner enforces the timeout itself first (it cancels the
// attempt's context); the grace leaves it time to do so and to record the
// failure, and absorbs the skew between the worker's clock (RunStep.Since)
// and the store's.
const DefaultStepTimeoutGrace = 15 * time.Second

// Error types of the attempt rows a store writes for attempts that ended
// without their worker (Attempt.Error.Type).
const (
	// ErrorTypeAttemptLost is the type of a lost attempt's error.
	ErrorTypeAttemptLost = "attempt_lost"
	// ErrorTypeStepTimeout is the type of a timed-out attempt's error: the one
	// a worker records for an attempt it ended at its timeout.
	ErrorTypeStepTimeout = "step_timeout"
)

// PastDeadline reports whether step s, still running at now, ran past its
// timeout plus grace (never for a step without a timeout).
func (s RunStep) PastDeadline(now time.Time, grace time.Duration) bool {
	return s.Timeout > 0 && s.Attempt > 0 && !now.Before(s.Since.Add(s.Timeout+grace))
}

// EndedAttempt returns the row a claim writes for step attempt s that was
// still running when its lease expired, found at now: AttemptTimedOut when it
// ran past its timeout plus grace, AttemptLost otherwise.
func (s RunStep) EndedAttempt(now time.Time, grace time.Duration) Attempt {
	a := Attempt{Position: s.Position, Attempt: s.Attempt, StartedAt: s.Since, FinishedAt: now,
		Outcome: AttemptLost, Error: LostAttemptError}
	if s.PastDeadline(now, grace) {
		a.Outcome, a.Error = AttemptTimedOut, TimedOutAttemptError
	}
	return a
}

// The errors of the attempt rows EndedAttempt returns.
var (
	LostAttemptError = ErrorInfo{Type: ErrorTypeAttemptLost,
		Message: "attempt lost: its worker's lease expired while it ran (the worker stopped or was cut off)"}
	TimedOutAttemptError = ErrorInfo{Type: ErrorTypeStepTimeout,
		Message: "attempt timed out: it ran past its timeout plus the grace, and the store ended its worker's lease"}
)

// StepTimeoutGraceOr returns grace, or DefaultStepTimeoutGrace when it is 0.
func StepTimeoutGraceOr(grace time.Duration) time.Duration {
	if grace == 0 {
		return DefaultStepTimeoutGrace
	}
	return grace
}

// EndedAttemptInfo is a step attempt a claim recorded as lost or timed out
// (RunsClaimResult.EndedAttempts).
type EndedAttemptInfo struct {
	Namespace string
	RunID     string
	Workflow  string
	Position  int
	Attempt   int
	Outcome   string
}

// ValidAttemptOutcome reports whether o is an outcome a stored attempt row may
// carry ("" included: a completing attempt's row, or a failed one written
// without an outcome).
func ValidAttemptOutcome(o string) bool {
	switch o {
	case "", AttemptFailed, AttemptLost, AttemptTimedOut, AttemptStarted:
		return true
	}
	return false
}

// NormalizeOutcome sets the outcome a reader reports for a row stored without
// one: AttemptFailed when it has an error.
func (a *Attempt) NormalizeOutcome() {
	if a.Outcome == "" && a.Error != (ErrorInfo{}) {
		a.Outcome = AttemptFailed
	}
}

// KVWrite is a write to a run's store; Delete removes the key.
type KVWrite struct {
	Key    string `json:"key"`
	Value  []byte `json:"value,omitempty"`
	Delete bool   `json:"delete,omitempty"`
}

// ReusePolicy decides what RunCreate does when the workflow ID is already used.
type ReusePolicy string

// Reuse policies.
const (
	// ReuseRejectActive rejects a start while a run with the same workflow ID is
	// active, and allows it once that run has finished. The default.
	ReuseRejectActive ReusePolicy = ""
	// ReuseReject rejects a start whenever any run with the workflow ID exists.
	ReuseReject ReusePolicy = "reject"
	// ReuseReturnExisting returns the latest run with the workflow ID, active or
	// finished, instead of starting a new one.
	ReuseReturnExisting ReusePolicy = "return_existing"
)

// RunCreateParams are the parameters of RunCreate.
type RunCreateParams struct {
	Namespace string `json:"namespace"`
	// ID is the new run's unique ID.
	ID string `json:"id"`
	// WorkflowID is the caller's key; at most one active run per (namespace, key).
	WorkflowID  string      `json:"workflow_id"`
	Workflow    string      `json:"workflow"`
	Queue       string      `json:"queue"`
	Priority    int         `json:"priority"`
	Version     int         `json:"version"`
	Input       []byte      `json:"input,omitempty"`
	Deadline    *time.Time  `json:"deadline,omitempty"`
	AvailableAt *time.Time  `json:"available_at,omitempty"`
	Reuse       ReusePolicy `json:"reuse,omitempty"`
	// Pinned pins the run to Version (1 to MaxVersion): see Run.Pinned.
	Pinned bool `json:"pinned,omitempty"`
	// ConcurrencyKey, when set, counts the run against its queue's KeyLimit: at
	// most that many runs with one key run at once (see QueueStore).
	ConcurrencyKey string `json:"concurrency_key,omitempty"`
	// Claim, when set, creates the run already claimed by this worker (running,
	// attempt 1, leased, a fresh token), in the same transaction: a worker with a
	// free slot in the starting process takes the run without a claim round trip.
	// It is ignored when ReuseReturnExisting returns an existing run, and with a
	// future AvailableAt, and when the run's queue limits claims (QueueStore): such
	// a run waits for an ordinary claim.
	Claim *CreateClaim `json:"claim,omitempty"`
	// History, when set, seeds the new run with recorded ops (each done, with its
	// AttemptLog of failed attempts) and KV with its run store, in the same
	// transaction: the run replays them before it executes anything new. Client.Reset
	// uses it to start a run from a point of an earlier one. It cannot be combined
	// with Claim or ReuseReturnExisting. A seeded run starts with Attempts 1: the
	// run its history came from counts as its first claim.
	History []*Op `json:"history,omitempty"`
	// KV is the run store of a seeded run (see History); only with History.
	KV []KVWrite `json:"kv,omitempty"`
	// Idempotency, when set, records an idempotency key with the run's creation,
	// atomically (see IdempotencyStore). Not with RunCreateTx.
	Idempotency *IdempotencyRecord `json:"-"`
	// TraceParent, when set, is the W3C traceparent of the call that starts the
	// run (at most 128 bytes), stored with it so that its executions join that
	// trace (docs/observability.md).
	TraceParent string `json:"trace_parent,omitempty"`
	// Retry, when set, is the run's workflow retry policy: it replaces the one
	// its workflow declares (see retry.go).
	Retry *RunRetry `json:"retry,omitempty"`
}

// NewRun is the run a create of p makes at now, before any claim (see
// CreateClaim.Apply): pending, available at p.AvailableAt (now when nil), at
// its first workflow attempt, with Attempts 1 when seeded with History. at
// gives each of its times as the store keeps them (their precision and
// location); nil keeps them as given. Input and Retry are p's own.
func (p *RunCreateParams) NewRun(now time.Time, at func(time.Time) time.Time) *Run {
	if at == nil {
		at = func(t time.Time) time.Time { return t }
	}
	now = at(now)
	run := &Run{
		Namespace: p.Namespace, ID: p.ID, WorkflowID: p.WorkflowID, Workflow: p.Workflow,
		Queue: p.Queue, Priority: p.Priority, Status: StatusPending, Version: p.Version,
		Input: p.Input, AvailableAt: now, CreatedAt: now, UpdatedAt: now, TraceParent: p.TraceParent,
		Pinned: p.Pinned, WorkflowAttempt: 1, Retry: p.Retry,
	}
	if p.Deadline != nil {
		d := at(*p.Deadline)
		run.Deadline = &d
	}
	if p.AvailableAt != nil {
		run.AvailableAt = at(*p.AvailableAt)
	}
	if len(p.History) > 0 {
		run.Attempts = 1 // the run its history came from counts as its first claim
	}
	return run
}

// CreateClaim asks RunCreate to lease the new run to Worker.
type CreateClaim struct {
	Worker        string        `json:"worker"`
	LeaseDuration time.Duration `json:"lease_duration"`
}

// Apply makes run, being created at now, claimed under c: running, attempt 1,
// started now and leased to c.Worker with a fresh run's first token (now in
// microseconds, the clock floor claims use); it returns the lease, with an
// empty history and inbox. The SQL drivers' RunCreate and RunsCreate use it.
func (c *CreateClaim) Apply(run *Run, now time.Time) *ClaimedRun {
	cr := &ClaimedRun{Run: run, LeaseToken: now.UnixMicro(), LeaseExpiresAt: now.Add(c.LeaseDuration),
		History: []*Op{}, Inbox: []*Event{}}
	run.Status, run.Attempts, run.LeaseOwner = StatusRunning, 1, c.Worker
	run.LeaseExpiresAt, run.StartedAt = &cr.LeaseExpiresAt, &now
	return cr
}

// RunCreateResult is the result of RunCreate.
type RunCreateResult struct {
	Run *Run `json:"run"`
	// Created is false when ReuseReturnExisting returned an existing run.
	Created bool `json:"created"`
	// Claimed is the lease on the new run when RunCreateParams.Claim was honoured
	// (Run is then Claimed.Run); nil otherwise.
	Claimed *ClaimedRun `json:"claimed,omitempty"`
}

// RunGetParams are the parameters of RunGet.
type RunGetParams struct {
	Namespace string `json:"namespace"`
	// Ref is a run ID or a workflow ID.
	Ref string `json:"ref"`
	// OmitLarge leaves the payloads the store keeps apart (docs/payloads.md)
	// out of the run (nil Input or Output), unread: for a caller that needs
	// only the run's record. A hint: a store may return them anyway.
	OmitLarge bool `json:"omit_large,omitempty"`
}

// RunListParams are the parameters of RunList. Zero fields do not filter.
type RunListParams struct {
	Namespace     string    `json:"namespace"`
	Statuses      []Status  `json:"statuses,omitempty"`
	Workflow      string    `json:"workflow,omitempty"`
	WorkflowID    string    `json:"workflow_id,omitempty"`
	Queue         string    `json:"queue,omitempty"`
	CreatedAfter  time.Time `json:"created_after,omitempty"`
	CreatedBefore time.Time `json:"created_before,omitempty"`
	// Limit caps the page size; 0 means 100. At most 1000.
	Limit int `json:"limit,omitempty"`
	// Cursor continues a previous listing (RunListResult.NextCursor).
	Cursor string `json:"cursor,omitempty"`
}

// RunListResult is one page of RunList.
type RunListResult struct {
	Runs []*Run `json:"runs"`
	// NextCursor is empty on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// RunCancelParams are the parameters of RunCancel.
type RunCancelParams struct {
	Namespace string `json:"namespace"`
	Ref       string `json:"ref"`
	// Idempotency, when set, records an idempotency key with the cancellation,
	// atomically (see IdempotencyStore); its response renders the *Run returned.
	Idempotency *IdempotencyRecord `json:"-"`
}

// RunResumeParams are the parameters of RunResume.
type RunResumeParams struct {
	Namespace string `json:"namespace"`
	Ref       string `json:"ref"`
	// Idempotency, when set, records an idempotency key with the resumption,
	// atomically (see IdempotencyStore); its response renders the *Run returned.
	Idempotency *IdempotencyRecord `json:"-"`
}

// RunsResumeBlockedParams are the parameters of RunsResumeBlocked.
type RunsResumeBlockedParams struct {
	Namespace string   `json:"namespace"`
	Workflows []string `json:"workflows"`
	// Queues, when not empty, limits the resumed runs to those of these
	// queues (a worker's).
	Queues []string `json:"queues,omitempty"`
}

// RunsClaimParams are the parameters of RunsClaim.
type RunsClaimParams struct {
	Namespace string `json:"namespace"`
	// Queues to claim from; empty means all queues.
	Queues []string `json:"queues,omitempty"`
	// Workflows the worker can run; only runs of these are claimed.
	Workflows []string `json:"workflows"`
	// Versions maps a workflow of Workflows to the versions of it the worker
	// serves: a pinned run (Run.Pinned) is claimed only by a worker that lists
	// its version here. Runs that are not pinned are claimed whatever their
	// version. A workflow without an entry gets none of its pinned runs.
	Versions map[string][]int `json:"versions,omitempty"`
	// Worker identifies the claiming worker (recorded as lease owner).
	Worker        string        `json:"worker"`
	Max           int           `json:"max"`
	LeaseDuration time.Duration `json:"lease_duration"`
	// StepTimeoutGrace is the grace past a step attempt's timeout after which
	// an attempt whose lease expired is recorded timed out rather than lost
	// (RunStep.EndedAttempt); 0 is DefaultStepTimeoutGrace. Set by the store's
	// caller (a server sets its own, whatever its workers send: no JSON).
	StepTimeoutGrace time.Duration `json:"-"`
}

// ClaimedRun is a run claimed by a worker, with its lease and history.
type ClaimedRun struct {
	Run            *Run      `json:"run"`
	LeaseToken     int64     `json:"lease_token"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	History        []*Op     `json:"history"`
	// Inbox holds the run's unconsumed events, in Seq order.
	Inbox []*Event `json:"inbox"`
	// QueueRetry is the default step retry policy of the run's queue, when its
	// record has one. Stores leave it nil: the client that executes the run
	// fills it from the queue's record (read through a cache of a few seconds),
	// and a server fills it in the runs it pushes to remote workers.
	QueueRetry *QueueRetry `json:"queue_retry,omitempty"`
	// PayloadLimit is the payload limit of the run's queue (Queue.PayloadLimit;
	// 0: none), filled as QueueRetry is: every payload the run writes (step
	// results, its output, run-store values, stream events) is held to it,
	// below the process's own limit (docs/payloads.md).
	PayloadLimit int `json:"payload_limit,omitempty"`
	// LeaseSecret is the secret a server hands a remote worker with the lease
	// (internal/secrets): the worker sends it back with every write of the
	// lease, and the server refuses a write without it. Stores leave it "": a
	// store's own callers hold its credentials and are trusted. It is never
	// stored nor shown to anyone but the worker it was issued to.
	LeaseSecret string `json:"-"`
}

// Lease is the lease the claim of c holds, with the run's queue, the claim's
// secret and the run's sequence as its RunSeq hint.
func (c *ClaimedRun) Lease() Lease {
	return Lease{Namespace: c.Run.Namespace, RunID: c.Run.ID, Token: c.LeaseToken, RunSeq: c.Run.Sequence,
		Queue: c.Run.Queue, Secret: c.LeaseSecret}
}

// RunsClaimResult is the result of RunsClaim.
type RunsClaimResult struct {
	Runs []*ClaimedRun `json:"runs"`
	// NextDue is the earliest future time at which another run of these workflows
	// becomes due (timer, backoff or lease expiry), if any. Workers sleep until
	// then unless woken earlier by TopicReady. A claim that leased Max runs leaves
	// it nil: its caller has no slot left to fill, and claims again when it has.
	NextDue *time.Time `json:"next_due,omitempty"`
	// EndedAttempts lists the step attempts the claim recorded as lost or timed
	// out. A claim first takes back every run of its namespace whose lease
	// expired (whatever its workflow or queue); for each whose last heartbeat
	// of that lease reported a step attempt running (Run.CurrentStep) that
	// did not complete, it writes, in its transaction, the attempt's row with
	// outcome AttemptLost or AttemptTimedOut (RunStep.EndedAttempt) and the
	// step's op (not done, Attempts that attempt) when it has none, so the
	// next attempt is numbered after it. For metrics: it stays in this process
	// (no JSON).
	EndedAttempts []EndedAttemptInfo `json:"-"`
}

// Lease identifies a worker's claim on a run.
type Lease struct {
	Namespace string `json:"namespace"`
	RunID     string `json:"run_id"`
	Token     int64  `json:"token"`
	// RunSeq, when not zero, is the run's Sequence as the claim returned it: a
	// hint with which a store may find the run without looking its ID up (the
	// Postgres store's checkpoint batches do). The store still checks that the
	// run there has Namespace and RunID; a wrong hint loses the lease, it never
	// touches another run. It stays in this process (no JSON).
	RunSeq int64 `json:"-"`
	// Queue and Secret, through a server: the run's queue, on which the
	// server authorizes the write, and the lease secret it issued with the
	// claim (ClaimedRun.LeaseSecret), which binds the namespace, run, queue
	// and token together. Stores do not read them.
	Queue  string `json:"-"`
	Secret string `json:"-"`
}

// LeasesExtendParams are the parameters of LeasesExtend.
type LeasesExtendParams struct {
	Leases   []Lease       `json:"leases"`
	Duration time.Duration `json:"duration"`
	// Steps, when not empty, has one entry per lease: the step attempt its run
	// is executing now (a zero RunStep when none), stored with the lease so that
	// readers see it as Run.CurrentStep. The heartbeat carries it: a step costs
	// no write of its own. When empty, every lease's run reports no step.
	//
	// A lease whose step ran past its timeout plus StepTimeoutGrace
	// (RunStep.PastDeadline, on the store's clock) is not extended: the store
	// ends it at once (the run is claimable now) and reports it Lost; the
	// claim that takes the run records the attempt timed out.
	Steps []RunStep `json:"steps,omitempty"`
	// StepTimeoutGrace is the grace past a step's timeout; 0 is
	// DefaultStepTimeoutGrace. Set by the store's caller (a server sets its
	// own, whatever its workers send: no JSON).
	StepTimeoutGrace time.Duration `json:"-"`
}

// LeasesExtendResult is the result of LeasesExtend.
type LeasesExtendResult struct {
	// Lost lists the run IDs whose lease is no longer held.
	Lost []string `json:"lost,omitempty"`
	// CancelRequested lists the run IDs (of held leases) with a cancellation.
	CancelRequested []string `json:"cancel_requested,omitempty"`
}

// LeaseReleaseParams are the parameters of LeaseRelease.
type LeaseReleaseParams struct {
	Lease Lease `json:"lease"`
	// Seq and Fingerprint guard the release as they guard a checkpoint (see
	// CheckpointParams.Seq): a retry of a release that was applied succeeds
	// without writing, as long as no other lease was taken on the run since.
	Seq         int64 `json:"seq,omitempty"`
	Fingerprint int64 `json:"fingerprint,omitempty"`
}

// CheckpointParams are the parameters of Checkpoint.
type CheckpointParams struct {
	Lease Lease `json:"lease"`
	// Ops are new or updated history entries (upserted by position).
	Ops []*Op `json:"ops,omitempty"`
	// Attempts are failed attempts to append.
	Attempts []Attempt `json:"attempts,omitempty"`
	// KV are run-store writes, applied in order.
	KV []KVWrite `json:"kv,omitempty"`
	// Status is the run's new state: running (keep the lease), waiting, blocked,
	// pending (hand back), succeeded, failed or cancelled. Any state but running
	// ends the lease.
	Status Status `json:"status"`
	// Output is the result of a succeeded run.
	Output []byte `json:"output,omitempty"`
	// Error is the error of a failed or cancelled run, or the reason of a blocked one.
	Error *ErrorInfo `json:"error,omitempty"`
	// WaitReason says why a waiting run waits.
	WaitReason string `json:"wait_reason,omitempty"`
	// WakeAt is when a waiting run becomes due again; nil waits until woken.
	WakeAt *time.Time `json:"wake_at,omitempty"`
	// WaitEvents (with Status waiting) name the events that end the wait early:
	// EventSend of one of them makes the run pending. When an unconsumed event
	// with one of these names is already in the inbox, the run is made pending
	// (due now) instead of waiting.
	WaitEvents []string `json:"wait_events,omitempty"`
	// NoEvents guards a checkpoint that records a wait as timed out: when an
	// unconsumed event with one of these names is in the inbox, the checkpoint
	// fails with ErrConflict and writes nothing (the caller replays the run).
	// Events this checkpoint consumes (Consume) do not count.
	NoEvents []string `json:"no_events,omitempty"`
	// Consume lists the Seqs of inbox events this checkpoint consumed. Each must
	// be an unconsumed event of this run, else ErrInvalidParams and nothing is
	// written.
	Consume []int64 `json:"consume,omitempty"`
	// Children are child runs to create, in groups started by ops of this run.
	Children []*ChildGroup `json:"children,omitempty"`
	// Approvals are approval requests to create. An ID already used in the
	// namespace fails the checkpoint with ErrInvalidParams.
	Approvals []*ApprovalRequest `json:"approvals,omitempty"`
	// ExpireApprovals lists IDs of this run's approval requests that timed out;
	// pending ones become expired.
	ExpireApprovals []string `json:"expire_approvals,omitempty"`
	// Stream are events to append to the run's stream, in order (stream.go).
	Stream []StreamWrite `json:"stream,omitempty"`
	// Seq and Fingerprint guard the checkpoint against being applied twice when
	// a worker retries it after its answer was lost. A write of a lease
	// (checkpoint or release) with Seq above 0 is the lease's Seq-th write (1,
	// 2, … in the order the worker makes them, one at a time per lease): the
	// pair (lease token, Seq) is its idempotency key, and Fingerprint (when not
	// 0) identifies its request. The store keeps the lease's last applied Seq
	// and Fingerprint on the run's row, set by the fenced update that applies
	// the write, so the key costs no write of its own. A write whose token is
	// the run's last lease token and whose Seq is at or below the kept one is
	// not applied again: it is answered as applied (CheckpointResult.Replayed),
	// or refused with ErrIdempotencyKeyConflict when its Seq is the kept one and
	// both fingerprints are set and differ. Seq 0 writes unguarded. The key
	// lives as long as the run's lease: a retry after another lease was taken
	// on the run fails with ErrLeaseLost.
	Seq         int64 `json:"seq,omitempty"`
	Fingerprint int64 `json:"fingerprint,omitempty"`
	// Retry, with Status failed, is the workflow retry policy the worker's
	// workflow declares: the store applies it when the run has none of its
	// own (see retry.go).
	Retry *RunRetry `json:"retry,omitempty"`
}

// AttemptRows is what a store writes to its attempt rows for p: p.Attempts, and
// the row that records each op's AttemptStartedAt (Op.SucceededAttempt), as
// readers take it back out (Op.TakeSucceededAttempt). p.Attempts is not changed.
func (p *CheckpointParams) AttemptRows() []Attempt {
	rows := slices.Clip(p.Attempts) // an append copies: p.Attempts stays as it is
	for _, op := range p.Ops {
		if a, ok := op.SucceededAttempt(); ok {
			rows = append(rows, a)
		}
	}
	return rows
}

// CheckpointResult is the result of Checkpoint.
type CheckpointResult struct {
	// CancelRequested reports a pending cancellation of the run.
	CancelRequested bool `json:"cancel_requested"`
	// At is the store clock's reading the checkpoint was written with: the run's
	// UpdatedAt when the checkpoint changed its status, and its FinishedAt when
	// the checkpoint finished it.
	At time.Time `json:"at"`
	// Replayed reports a retry of a checkpoint that was applied already (see
	// CheckpointParams.Seq): nothing was written; CancelRequested is the run's
	// now and At its UpdatedAt.
	Replayed bool `json:"replayed,omitempty"`
	// RetryAt, for a checkpoint that failed the run, says that the store made
	// it a workflow retry instead (see retry.go): the run waits until then.
	RetryAt *time.Time `json:"retry_at,omitempty"`
}

// FinalRun is run as checkpoint p, which ended it and which the store answered
// with res, left it in the store: what a read of the run would return, for a
// caller that holds the run as its lease found it (the run it claimed, or
// created claimed) and would otherwise read it again only to hand it to those
// waiting for its end.
func FinalRun(run *Run, p *CheckpointParams, res *CheckpointResult) *Run {
	r := *run
	r.Status, r.Output, r.Error = p.Status, p.Output, p.Error
	r.WaitReason, r.LeaseOwner, r.LeaseExpiresAt, r.CurrentStep = "", "", nil, nil
	r.CancelRequested = res.CancelRequested
	at := res.At
	r.UpdatedAt, r.FinishedAt = at, &at
	return &r
}

// HistoryListParams are the parameters of HistoryList.
type HistoryListParams struct {
	Namespace string `json:"namespace"`
	Ref       string `json:"ref"`
	// OmitLarge leaves the results the store keeps apart out of the ops (nil
	// Result), unread, as RunGetParams.OmitLarge does.
	OmitLarge bool `json:"omit_large,omitempty"`
}

// KVGetParams are the parameters of KVGet.
type KVGetParams struct {
	Namespace string `json:"namespace"`
	Ref       string `json:"ref"`
	Key       string `json:"key"`
}

// CommitObserver is implemented by stores that group write requests (checkpoints,
// creates, ...) into batched commits: the SQLite and Postgres stores. After
// ObserveCommits, f is called after every batch with the number of requests it
// carried and the wall time from the batch's start to its commit (metrics).
// Each call adds an observer (a server's metrics and a test may both watch a
// store), until stop.
type CommitObserver interface {
	ObserveCommits(f func(requests int, elapsed time.Duration)) (stop func())
}

// QueueCounter is implemented by stores that count their unfinished runs by
// queue cheaply (from the partial indexes of each unfinished status): the SQL
// stores. Metrics read it at scrape time.
type QueueCounter interface {
	// QueueCounts counts the pending, running, waiting and blocked runs of
	// every namespace by queue. Groups without runs are left out.
	QueueCounts(ctx context.Context) ([]QueueCount, error)
}

// WorkerCounter is implemented by stores that count their live workers of
// every namespace in one query: the SQL stores. Metrics read it at scrape time
// (trellis_workers_connected), so that a server reports the workers of every
// namespace, not only of those it has served a request for.
type WorkerCounter interface {
	// WorkerCounts counts the live workers (heartbeating: not expired) of
	// every namespace. Namespaces without a live worker are left out.
	WorkerCounts(ctx context.Context) ([]WorkerCount, error)
}

// WorkerCount is the number of live workers of a namespace.
type WorkerCount struct {
	Namespace string
	Count     int64
}

// QueueCount is the number of runs of a namespace, queue and status.
type QueueCount struct {
	Namespace string
	Queue     string
	Status    Status
	Count     int64
}
