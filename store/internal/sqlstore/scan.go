package sqlstore

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// Scanner is one row: *sql.Row, *sql.Rows, pgx.Row, pgx.Rows, a driver's own rows.
type Scanner interface{ Scan(dest ...any) error }

// Time is a scan destination for a time column of either dialect: unix
// nanoseconds (SQLite's INTEGER) or a timestamp (Postgres' TIMESTAMPTZ), read in
// UTC. NULL leaves it invalid.
type Time struct {
	T     time.Time
	Valid bool
}

// Scan implements sql.Scanner. (storepg's connections scan timestamptz into a
// Time without it, through pgx's TimestamptzScanner: see storepg's scantime.go.)
func (t *Time) Scan(v any) error {
	switch x := v.(type) {
	case nil:
		*t = Time{}
	case int64:
		*t = Time{T: time.Unix(0, x).UTC(), Valid: true}
	case time.Time:
		*t = Time{T: x.UTC(), Valid: true}
	default:
		return fmt.Errorf("scanning a time: unsupported type %T", v)
	}
	return nil
}

// Ptr returns the time, nil when NULL.
func (t *Time) Ptr() *time.Time {
	if !t.Valid {
		return nil
	}
	u := t.T
	return &u
}

// RunCols are the columns ScanRun reads, in order.
const RunCols = `namespace, id, workflow_id, workflow, queue, priority, status, version,
	sequence, input, output, error, wait_reason, cancel_requested, deadline, available_at,
	attempts, lease_owner, lease_token, lease_expires_at, created_at, started_at,
	updated_at, finished_at, parent_id, trace_parent, current_step, pin_version, retry`

// ScanRun reads RunCols into a Run and returns it with its lease token.
func ScanRun(sc Scanner) (*store.Run, int64, error) {
	s := runScans.Get().(*runScan)
	defer s.release()
	if err := sc.Scan(s.dest...); err != nil {
		return nil, 0, err
	}
	r := s.r
	r.Status = store.Status(s.status)
	var err error
	if r.Error, err = ErrFromJSON(s.errText); err != nil {
		return nil, 0, err
	}
	r.Deadline, r.AvailableAt, r.LeaseExpiresAt = s.deadline.Ptr(), s.avail.T, s.leaseExp.Ptr()
	r.CreatedAt, r.StartedAt, r.UpdatedAt, r.FinishedAt = s.created.T, s.started.Ptr(), s.upd.T, s.finish.Ptr()
	r.Pinned = s.pin != 0
	if s.step.Valid && r.Status == store.StatusRunning {
		r.CurrentStep = StepFromText(s.step.String, s.token)
	}
	if err := store.DecodeRetryState(s.retry.String, s.retry.Valid, &r); err != nil {
		return nil, 0, err
	}
	return &r, s.token, nil
}

// runScan holds the destinations of ScanRun, and the list of them that Scan
// takes. They are reused: Scan is an interface call, so every destination
// handed to it by address, and the list, went to the heap, two thirds of what
// reading a run allocated.
type runScan struct {
	r                                                        store.Run
	status                                                   string
	errText, step, retry                                     sql.NullString
	deadline, avail, leaseExp, created, started, upd, finish Time
	token, pin                                               int64
	dest                                                     []any
}

// spareDest is how many destinations a scan of RunCols may append (see runScans).
const spareDest = 4

var runScans = sync.Pool{New: func() any {
	s := &runScan{}
	r := &s.r
	// Spare capacity: a driver that reads more columns after these (Postgres'
	// claims: the history and the inbox) appends its destinations here instead
	// of copying the list into a new one for every row.
	s.dest = append(make([]any, 0, 29+spareDest), &r.Namespace, &r.ID, &r.WorkflowID, &r.Workflow, &r.Queue, &r.Priority,
		&s.status, &r.Version, &r.Sequence, &r.Input, &r.Output, &s.errText, &r.WaitReason,
		&r.CancelRequested, &s.deadline, &s.avail, &r.Attempts, &r.LeaseOwner, &s.token, &s.leaseExp,
		&s.created, &s.started, &s.upd, &s.finish, &r.ParentID, &r.TraceParent, &s.step, &s.pin, &s.retry)
	return s
}}

// release clears what the last scan left (it may hold a large input or
// output) and returns s to the pool.
func (s *runScan) release() {
	dest := s.dest
	*s = runScan{}
	s.dest = dest
	runScans.Put(s)
}

// stepText is how the current_step column holds a RunStep, with the lease
// token of the heartbeat that reported it: a later lease of the run (another
// worker's claim) does not show its predecessor's step.
type stepText struct {
	Name     string        `json:"name"`
	Attempt  int           `json:"attempt"`
	Since    time.Time     `json:"since"`
	Lease    int64         `json:"lease"`
	Position int           `json:"position,omitempty"`
	Timeout  time.Duration `json:"timeout,omitempty"` // nanoseconds
}

// StepText encodes the step a heartbeat of lease token reports for the
// current_step column: NULL when no step is running.
func StepText(s store.RunStep, token int64) any {
	if s.Name == "" {
		return nil
	}
	b, _ := json.Marshal(stepText{Name: s.Name, Attempt: s.Attempt, Since: s.Since.UTC(), Lease: token,
		Position: s.Position, Timeout: s.Timeout})
	return string(b)
}

// StepFromText decodes a current_step column for a run held with lease token:
// nil when it was written under another lease or cannot be read.
func StepFromText(text string, token int64) *store.RunStep {
	var st stepText
	if json.Unmarshal([]byte(text), &st) != nil || st.Lease != token || st.Name == "" {
		return nil
	}
	return &store.RunStep{Name: st.Name, Attempt: st.Attempt, Since: st.Since, Position: st.Position, Timeout: st.Timeout}
}

// StepsOf returns the steps p reports, one per lease (zero when none).
func StepsOf(p *store.LeasesExtendParams) []store.RunStep {
	if len(p.Steps) == len(p.Leases) {
		return p.Steps
	}
	return make([]store.RunStep, len(p.Leases))
}

// Suffixed scans extra columns that follow the ones a scan function reads.
type Suffixed struct {
	Row  Scanner
	Rest []any
}

// Scan implements Scanner.
func (s Suffixed) Scan(dest ...any) error { return s.Row.Scan(append(dest, s.Rest...)...) }

// ErrJSON encodes an optional ErrorInfo as JSON text (NULL when nil).
func ErrJSON(e *store.ErrorInfo) (any, error) {
	if e == nil {
		return nil, nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encoding error info: %w", err)
	}
	return string(b), nil
}

// ErrFromJSON decodes an optional ErrorInfo column.
func ErrFromJSON(v sql.NullString) (*store.ErrorInfo, error) {
	if !v.Valid {
		return nil, nil
	}
	var e store.ErrorInfo
	if err := json.Unmarshal([]byte(v.String), &e); err != nil {
		return nil, fmt.Errorf("decoding error info: %w", err)
	}
	return &e, nil
}
