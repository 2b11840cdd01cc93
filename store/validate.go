package store

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Validate reports the first missing or malformed field of p, wrapping
// ErrInvalidParams. Drivers call it before writing anything.
func (p *RunCreateParams) Validate() error {
	for _, f := range []struct{ name, val string }{
		{"Namespace", p.Namespace}, {"ID", p.ID}, {"WorkflowID", p.WorkflowID},
		{"Workflow", p.Workflow}, {"Queue", p.Queue},
	} {
		if f.val == "" {
			return fmt.Errorf("%w: %s is required", ErrInvalidParams, f.name)
		}
	}
	if len(p.ConcurrencyKey) > MaxNameLen {
		return fmt.Errorf("%w: ConcurrencyKey is longer than %d bytes", ErrInvalidParams, MaxNameLen)
	}
	if p.Pinned && (p.Version < 1 || p.Version > MaxVersion) {
		return fmt.Errorf("%w: a pinned run's Version is 1 to %d, not %d", ErrInvalidParams, MaxVersion, p.Version)
	}
	if c := p.Claim; c != nil && (c.Worker == "" || c.LeaseDuration <= 0) {
		return fmt.Errorf("%w: Claim needs a Worker and a positive LeaseDuration", ErrInvalidParams)
	}
	switch p.Reuse {
	case ReuseRejectActive, ReuseReject, ReuseReturnExisting:
	default:
		return fmt.Errorf("%w: Reuse: unknown policy %q", ErrInvalidParams, p.Reuse)
	}
	if len(p.TraceParent) > 128 {
		return fmt.Errorf("%w: TraceParent is %d bytes (at most 128)", ErrInvalidParams, len(p.TraceParent))
	}
	if err := p.Idempotency.Validate(); err != nil {
		return err
	}
	if err := p.Retry.Validate(); err != nil {
		return err
	}
	return p.validateSeed()
}

// validateSeed checks the History and KV of a seeded create.
func (p *RunCreateParams) validateSeed() error {
	switch {
	case len(p.History) == 0 && len(p.KV) > 0:
		return fmt.Errorf("%w: KV needs History", ErrInvalidParams)
	case len(p.History) == 0:
		return nil
	case p.Claim != nil || p.Reuse == ReuseReturnExisting:
		return fmt.Errorf("%w: History cannot be combined with Claim or ReuseReturnExisting", ErrInvalidParams)
	}
	seen := make(map[int]bool, len(p.History))
	for _, op := range p.History {
		switch {
		case op == nil || op.Position < 0 || seen[op.Position]:
			return fmt.Errorf("%w: History: missing, negative or repeated position", ErrInvalidParams)
		case !op.Done:
			return fmt.Errorf("%w: History: op %d is not done", ErrInvalidParams, op.Position)
		}
		for _, a := range op.AttemptLog {
			if !ValidAttemptOutcome(a.Outcome) {
				return fmt.Errorf("%w: History: attempt %d of op %d has an unknown outcome %q", ErrInvalidParams, a.Attempt, op.Position, a.Outcome)
			}
		}
		seen[op.Position] = true
	}
	return nil
}

// SeedCheckpoint returns a seeded create's History as the checkpoint that
// writes it: its ops, the failed attempts they logged (Op.AttemptLog) and the
// run-store writes. The rows of the ops' AttemptStartedAt come from its
// AttemptRows, as for any checkpoint.
func (p *RunCreateParams) SeedCheckpoint() *CheckpointParams {
	var logs []Attempt
	for _, op := range p.History {
		logs = append(logs, op.AttemptLog...)
	}
	return &CheckpointParams{Ops: p.History, Attempts: logs, KV: p.KV}
}

// Validate checks an event's name (required, not reserved) and claim, wrapping
// ErrInvalidParams.
func (p *EventSendParams) Validate() error {
	switch {
	case p.Name == "":
		return fmt.Errorf("%w: Name is required", ErrInvalidParams)
	case strings.HasPrefix(p.Name, ReservedEventPrefix):
		return fmt.Errorf("%w: names starting with %q are reserved", ErrInvalidParams, ReservedEventPrefix)
	case p.Claim != nil && (p.Claim.Worker == "" || p.Claim.LeaseDuration <= 0):
		return fmt.Errorf("%w: Claim needs a Worker and a positive LeaseDuration", ErrInvalidParams)
	}
	return p.Idempotency.Validate()
}

// Validate checks a checkpoint's status and the parts that can be checked
// before writing: no event consumed twice, well-formed child groups (a child
// ID given twice is ErrRunExists) and approval requests. Other errors wrap
// ErrInvalidParams.
func (p *CheckpointParams) Validate() error {
	// Each part is checked in a function of its own, called only when the
	// checkpoint has that part: every run's workflow goroutine validates its
	// checkpoints, and the frames of these checks, had they been one, made each
	// of those goroutines grow its stack from 4 to 8 KiB (copying it) for the
	// parts it does not have.
	if !p.Status.Valid() || p.Seq < 0 {
		return p.invalidHead()
	}
	if len(p.Attempts) > 0 {
		if err := validateAttempts(p.Attempts); err != nil {
			return err
		}
	}
	if len(p.Consume) > 1 {
		if err := validateConsume(p.Consume); err != nil {
			return err
		}
	}
	for _, w := range p.Stream {
		if w.Name == "" {
			return errStreamNoName
		}
	}
	if len(p.Children) > 0 {
		if err := validateChildren(p.Children); err != nil {
			return err
		}
	}
	if p.Retry != nil {
		if err := p.validateRetry(); err != nil {
			return err
		}
	}
	if len(p.Approvals) > 0 {
		return validateApprovals(p.Approvals)
	}
	return nil
}

var errStreamNoName = fmt.Errorf("%w: Stream: an event has no Name", ErrInvalidParams)

// invalidHead is the error of a checkpoint whose status or Seq is invalid.
func (p *CheckpointParams) invalidHead() error {
	if !p.Status.Valid() {
		return fmt.Errorf("%w: Status: unknown status %q", ErrInvalidParams, p.Status)
	}
	return fmt.Errorf("%w: Seq: %d is below 0", ErrInvalidParams, p.Seq)
}

func validateAttempts(atts []Attempt) error {
	for _, a := range atts {
		if !ValidAttemptOutcome(a.Outcome) {
			return fmt.Errorf("%w: Attempts: attempt %d of op %d has an unknown outcome %q", ErrInvalidParams, a.Attempt, a.Position, a.Outcome)
		}
	}
	return nil
}

func validateConsume(consume []int64) error {
	seen := make(map[int64]bool, len(consume))
	for _, seq := range consume {
		if seen[seq] {
			return fmt.Errorf("%w: Consume: event %d twice", ErrInvalidParams, seq)
		}
		seen[seq] = true
	}
	return nil
}

func (p *CheckpointParams) validateRetry() error {
	if p.Status != StatusFailed {
		return fmt.Errorf("%w: Retry goes only with Status failed", ErrInvalidParams)
	}
	return p.Retry.Validate()
}

func validateChildren(groups []*ChildGroup) error {
	ids := make(map[string]bool)
	positions := make(map[int]bool)
	for _, g := range groups {
		switch {
		case len(g.Runs) == 0:
			return fmt.Errorf("%w: Children: the group at position %d has no runs", ErrInvalidParams, g.Position)
		case g.MaxConcurrency < 0:
			return fmt.Errorf("%w: Children: MaxConcurrency %d is negative", ErrInvalidParams, g.MaxConcurrency)
		case positions[g.Position]:
			return fmt.Errorf("%w: Children: two groups at position %d", ErrInvalidParams, g.Position)
		}
		positions[g.Position] = true
		for _, r := range g.Runs {
			for _, f := range []struct{ name, val string }{
				{"ID", r.ID}, {"WorkflowID", r.WorkflowID}, {"Workflow", r.Workflow}, {"Queue", r.Queue},
			} {
				if f.val == "" {
					return fmt.Errorf("%w: Children: %s is required", ErrInvalidParams, f.name)
				}
			}
			if len(r.TraceParent) > 128 {
				return fmt.Errorf("%w: Children: TraceParent is %d bytes (at most 128)", ErrInvalidParams, len(r.TraceParent))
			}
			if ids[r.ID] {
				return fmt.Errorf("%w: Children: run %q twice", ErrRunExists, r.ID)
			}
			ids[r.ID] = true
		}
	}
	return nil
}

func validateApprovals(reqs []*ApprovalRequest) error {
	ids := make(map[string]bool, len(reqs))
	for _, a := range reqs {
		switch {
		case a.ID == "":
			return fmt.Errorf("%w: Approvals: ID is required", ErrInvalidParams)
		case ids[a.ID]:
			return fmt.Errorf("%w: Approvals: ID %q twice", ErrInvalidParams, a.ID)
		}
		ids[a.ID] = true
	}
	return nil
}

// Page sizes of RunList and ApprovalList.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// ListLimit returns the page size of a list call asking for limit:
// DefaultListLimit for 0, at most MaxListLimit; a negative limit is
// ErrInvalidParams.
func ListLimit(limit int) (int, error) {
	switch {
	case limit < 0:
		return 0, fmt.Errorf("%w: Limit %d is negative", ErrInvalidParams, limit)
	case limit == 0:
		return DefaultListLimit, nil
	}
	return min(limit, MaxListLimit), nil
}

// Page trims rows read with ListLimit's limit+1 to limit, and returns the
// NextCursor for the rows after them ("" on the last page), from the sequence of
// the page's last row. Lists are newest first, by a positive sequence.
func Page[T any](rows []T, limit int, seq func(T) int64) ([]T, string) {
	if len(rows) <= limit {
		return rows, ""
	}
	rows = rows[:limit]
	return rows, strconv.FormatInt(seq(rows[limit-1]), 10)
}

// ParseCursor reads a cursor of Page: the list continues below the sequence it
// returns. It returns 0 for "" and ErrInvalidParams for anything malformed.
func ParseCursor(c string) (int64, error) {
	if c == "" {
		return 0, nil
	}
	after, err := strconv.ParseInt(c, 10, 64)
	if err != nil || after <= 0 {
		return 0, fmt.Errorf("%w: malformed Cursor %q", ErrInvalidParams, c)
	}
	return after, nil
}

// Validate checks a claim's required fields, wrapping ErrInvalidParams.
func (p *RunsClaimParams) Validate() error {
	switch {
	case len(p.Workflows) == 0:
		return fmt.Errorf("%w: Workflows is required", ErrInvalidParams)
	case p.Max <= 0:
		return fmt.Errorf("%w: Max must be positive", ErrInvalidParams)
	case p.LeaseDuration <= 0:
		return fmt.Errorf("%w: LeaseDuration must be positive", ErrInvalidParams)
	case p.StepTimeoutGrace < 0:
		return fmt.Errorf("%w: StepTimeoutGrace must not be negative", ErrInvalidParams)
	}
	return ValidateVersions(p.Versions)
}

// MaxVersion is the highest workflow version a run may be pinned to.
const MaxVersion = math.MaxInt32

// ValidateVersions checks a worker's served versions (RunsClaimParams.Versions,
// WorkerHeartbeatParams.Versions): named workflows, versions 0 to MaxVersion.
func ValidateVersions(vs map[string][]int) error {
	for wf, list := range vs {
		if wf == "" {
			return fmt.Errorf("%w: Versions: empty workflow name", ErrInvalidParams)
		}
		for _, v := range list {
			if v < 0 || v > MaxVersion {
				return fmt.Errorf("%w: Versions: version %d of workflow %q is not 0 to %d", ErrInvalidParams, v, wf, MaxVersion)
			}
		}
	}
	return nil
}

// Validate reports a malformed field of p, wrapping ErrInvalidParams.
func (p *LeasesExtendParams) Validate() error {
	if p.Duration <= 0 {
		return fmt.Errorf("%w: Duration must be positive", ErrInvalidParams)
	}
	if p.StepTimeoutGrace < 0 {
		return fmt.Errorf("%w: StepTimeoutGrace must not be negative", ErrInvalidParams)
	}
	if len(p.Steps) != 0 && len(p.Steps) != len(p.Leases) {
		return fmt.Errorf("%w: %d Steps for %d Leases (one per lease, or none)", ErrInvalidParams, len(p.Steps), len(p.Leases))
	}
	for _, s := range p.Steps {
		if len(s.Name) > MaxNameLen || s.Attempt < 0 || (s.Name == "") != (s.Attempt == 0) {
			return fmt.Errorf("%w: Steps: a step has a name of at most %d bytes and an attempt from 1, or neither", ErrInvalidParams, MaxNameLen)
		}
		if s.Position < 0 || s.Timeout < 0 {
			return fmt.Errorf("%w: Steps: step %q has a negative position or timeout", ErrInvalidParams, s.Name)
		}
	}
	return nil
}

// Validate reports malformed parameters, wrapping ErrInvalidParams.
func (p *LeaseReleaseParams) Validate() error {
	if p.Seq < 0 {
		return fmt.Errorf("%w: Seq: %d is below 0", ErrInvalidParams, p.Seq)
	}
	return nil
}
