package store

import (
	"slices"
	"strconv"
	"time"
)

// Events. An event is sent to one run and waits in the run's inbox until the run
// consumes it (CheckpointParams.Consume), exactly once. Per name, a run sees its
// events in Seq order.
type Event struct {
	// Seq is the event's global send order.
	Seq       int64     `json:"seq"`
	Namespace string    `json:"namespace"`
	RunID     string    `json:"run_id"`
	Name      string    `json:"name"`
	Payload   []byte    `json:"payload,omitempty"`
	SentAt    time.Time `json:"sent_at"`
}

// EventSendParams are the parameters of EventSend.
type EventSendParams struct {
	Namespace string `json:"namespace"`
	// Ref is a run ID, or a workflow ID meaning its latest run.
	Ref string `json:"ref"`
	// Name must not start with "trellis.": those names are the store's own
	// (group and approval events), sent only by the store (ErrInvalidParams).
	Name    string `json:"name"`
	Payload []byte `json:"payload,omitempty"`
	// Claim, when set and the event wakes the run (it was waiting for this
	// name), leases the run to Claim.Worker in the same transaction if the run's
	// workflow and queue are among those given: the sender's own worker takes
	// the run without a claim round trip (see RunCreateParams.Claim).
	Claim *EventClaim `json:"claim,omitempty"`
	// Idempotency, when set, records an idempotency key with the event,
	// atomically (see IdempotencyStore).
	Idempotency *IdempotencyRecord `json:"-"`
}

// EventClaim asks EventSend to lease the run it wakes.
type EventClaim struct {
	Worker        string        `json:"worker"`
	LeaseDuration time.Duration `json:"lease_duration"`
	// Workflows the worker runs; the run is claimed only if its workflow is one.
	Workflows []string `json:"workflows"`
	// Queues the worker serves; empty means all.
	Queues []string `json:"queues,omitempty"`
	// Versions the worker serves, as RunsClaimParams.Versions: a run pinned
	// to a version is claimed only if it is listed for its workflow.
	Versions map[string][]int `json:"versions,omitempty"`
}

// Takes reports whether the worker of c claims run: its workflow, queue and,
// for a pinned run, version.
func (c *EventClaim) Takes(run *Run) bool {
	return slices.Contains(c.Workflows, run.Workflow) && (len(c.Queues) == 0 || slices.Contains(c.Queues, run.Queue)) &&
		(!run.Pinned || slices.Contains(c.Versions[run.Workflow], run.Version))
}

// EventSendResult is the result of EventSend.
type EventSendResult struct {
	Event *Event `json:"event"`
	// Claimed is the lease on the woken run when EventSendParams.Claim was
	// honoured, with its history and inbox; nil otherwise.
	Claimed *ClaimedRun `json:"claimed,omitempty"`
}

// Child runs. An op of a parent run starts a group of children (one for a single
// child, many for a fan-out) in the same checkpoint that records the op.

// ChildGroup is the children one op of a parent starts.
type ChildGroup struct {
	// Position is the parent's op that starts the group.
	Position int `json:"position"`
	// MaxConcurrency caps how many children of the group are pending or running
	// at once; 0 means no cap. The others are held (pending, not due: zero
	// AvailableAt, wait reason saying so) and released in item order as earlier
	// ones finish.
	MaxConcurrency int `json:"max_concurrency,omitempty"`
	// FailFast: the first child that ends failed or cancelled cancels the rest of
	// the group (held ones at once, others as RunCancel does).
	FailFast bool `json:"fail_fast,omitempty"`
	// Detached: the parent is not told when the group ends, and cancelling the
	// parent does not cancel the group.
	Detached bool `json:"detached,omitempty"`
	// Runs are the children in item order; at least one (else ErrInvalidParams).
	// Their Namespace is the parent's; ID, WorkflowID, Workflow and Queue are
	// required; Claim, AvailableAt and Reuse are ignored (IDs must be new, and
	// no active run may have the WorkflowID: else ErrRunExists fails the whole
	// checkpoint). TraceParent, when set, is stored with each child as with
	// RunCreate: the trace context of the parent's attempt that started it.
	Runs []*RunCreateParams `json:"runs"`
}

// Whenever a child reaches a final state, by any path (its own checkpoint, a
// cancellation, FailFast), the store counts it in its group in the same
// transaction and releases the next held child.

// ReservedEventPrefix starts the names of the events the store itself sends.
const ReservedEventPrefix = "trellis."

// GroupEvent is the name of the event the store adds to a parent's inbox when
// the group started at position ends: when its last child finishes or, with
// FailFast, when the first child ends failed or cancelled. Its payload is a
// GroupOutcome as JSON. A parent that has finished gets no event.
func GroupEvent(position int) string { return "trellis.group." + strconv.Itoa(position) }

// GroupOutcome is the payload of a GroupEvent: counts of the group's children by
// final state at the time the group ended (with FailFast, after the siblings
// that end at once were cancelled).
type GroupOutcome struct {
	Total     int `json:"total"`
	Succeeded int `json:"succeeded"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
}

// RunChildrenParams are the parameters of RunChildren.
type RunChildrenParams struct {
	Namespace string `json:"namespace"`
	// Parent is the parent's run ID.
	Parent   string `json:"parent"`
	Position int    `json:"position"`
}

// Approvals. An op of a run creates an approval request; a client decides it; the
// decision reaches the run as an event.

// ApprovalStatus is the state of an approval request.
type ApprovalStatus string

// Approval states.
const (
	ApprovalPending  ApprovalStatus = "pending"
	ApprovalApproved ApprovalStatus = "approved"
	ApprovalRejected ApprovalStatus = "rejected"
	ApprovalExpired  ApprovalStatus = "expired"
)

// ApprovalRequest is an approval a checkpoint creates.
type ApprovalRequest struct {
	// ID is unique in the namespace.
	ID       string `json:"id"`
	Position int    `json:"position"`
	Name     string `json:"name"`
	// Approvers name who may decide (principals or roles; recorded, enforced by
	// the server's auth).
	Approvers []string   `json:"approvers,omitempty"`
	Subject   string     `json:"subject,omitempty"`
	Details   []byte     `json:"details,omitempty"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
}

// Approval is an approval request and its decision.
type Approval struct {
	Namespace string         `json:"namespace"`
	ID        string         `json:"id"`
	RunID     string         `json:"run_id"`
	Workflow  string         `json:"workflow"`
	Position  int            `json:"position"`
	Name      string         `json:"name"`
	Approvers []string       `json:"approvers,omitempty"`
	Subject   string         `json:"subject,omitempty"`
	Details   []byte         `json:"details,omitempty"`
	Status    ApprovalStatus `json:"status"`
	// Principal and Comment are the decider's, once decided.
	Principal string     `json:"principal,omitempty"`
	Comment   string     `json:"comment,omitempty"`
	CreatedAt time.Time  `json:"created_at"`
	ExpiresAt *time.Time `json:"expires_at,omitempty"`
	DecidedAt *time.Time `json:"decided_at,omitempty"`
}

// ApprovalEvent is the name of the event that carries the decision of approval
// id to its run; the payload is the decided Approval as JSON.
func ApprovalEvent(id string) string { return "trellis.approval." + id }

// ApprovalGetParams are the parameters of ApprovalGet.
type ApprovalGetParams struct {
	Namespace string `json:"namespace"`
	ID        string `json:"id"`
}

// ApprovalListParams are the parameters of ApprovalList. Zero fields do not filter.
type ApprovalListParams struct {
	Namespace string           `json:"namespace"`
	Statuses  []ApprovalStatus `json:"statuses,omitempty"`
	// Run is a run ID.
	Run string `json:"run,omitempty"`
	// Limit caps the page size; 0 means 100. At most 1000.
	Limit  int    `json:"limit,omitempty"`
	Cursor string `json:"cursor,omitempty"`
}

// ApprovalListResult is one page of ApprovalList.
type ApprovalListResult struct {
	Approvals  []*Approval `json:"approvals"`
	NextCursor string      `json:"next_cursor,omitempty"`
}

// ApprovalDecideParams are the parameters of ApprovalDecide.
type ApprovalDecideParams struct {
	Namespace string `json:"namespace"`
	ID        string `json:"id"`
	Approve   bool   `json:"approve"`
	// Principal is who decides; required.
	Principal string `json:"principal"`
	Comment   string `json:"comment,omitempty"`
	// Idempotency, when set, records an idempotency key with the decision,
	// atomically (see IdempotencyStore); its response renders the *Approval.
	Idempotency *IdempotencyRecord `json:"-"`
}
