package storesqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// sqlRunInsert creates a run, pending or (with a claim) already running.
const sqlRunInsert = `INSERT INTO runs (namespace, id, workflow_id, workflow, queue, priority,
	status, version, input, deadline, available_at, attempts, lease_owner, lease_token,
	lease_expires_at, created_at, started_at, updated_at, concurrency_key, trace_parent, pin_version, retry)
	VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`

// sqlQueueRestricted finds whether a queue limits claims (a run created in it is
// never created claimed).
const sqlQueueRestricted = `SELECT 1 FROM queues WHERE namespace = ? AND name = ? AND ` + sqlstore.Restricted

// sqlLatestByWorkflowID is the latest run with workflow ID ?2: of those started
// with it (runs_workflow_id) and the one started without one whose ID it is
// (runs_namespace_id; see workflowIDIs).
const sqlLatestByWorkflowID = `SELECT ` + runCols + ` FROM runs WHERE sequence = (SELECT MAX(s) FROM (
	SELECT MAX(sequence) AS s FROM runs WHERE namespace = ?1 AND workflow_id = ?2 AND workflow_id <> id
	UNION ALL SELECT sequence FROM runs WHERE namespace = ?1 AND id = ?2 AND workflow_id = id))`

// sqlImplicitTaken finds whether run ?2 of namespace ?1, started without a
// workflow ID, is unfinished: a start with workflow ID ?2 must then be refused.
// runs_active_workflow_id holds only the runs started with a workflow ID
// (migration 0029), so it no longer refuses such a start itself. (The other way
// round needs no check: a run started without a workflow ID has a fresh ID.)
const sqlImplicitTaken = `SELECT 1 FROM runs WHERE namespace = ?1 AND id = ?2 AND workflow_id = id
	AND finished_at IS NULL`

// implicitTaken reports whether a run started with workflow ID wid is refused
// because the unfinished run with that ID was started without one. The writer's
// transaction holds the database, so nothing comes between this check and the
// insert that follows it.
func implicitTaken(tx *wtx, namespace, id, wid string) (bool, error) {
	if wid == id {
		return false, nil
	}
	switch err := tx.queryRow(sqlImplicitTaken, namespace, wid).Scan(new(int)); {
	case err == nil:
		return true, nil
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	default:
		return false, fmt.Errorf("checking workflow ID %q: %w", wid, err)
	}
}

// RunCreate implements sqlstore.Own: store.Store's RunCreate, under the payloads stored apart.
func (d seam) RunCreate(ctx context.Context, p *store.RunCreateParams) (*store.RunCreateResult, error) {
	s := d.s
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("creating run: %w", err)
	}
	if err := s.reserve.Load().admit(); err != nil {
		return nil, fmt.Errorf("creating run: %w", err)
	}
	var res *store.RunCreateResult
	err := s.write(ctx, func(tx *wtx) error {
		if err := shared.IdempotencyBegin(tx, p.Namespace, p.Idempotency); err != nil {
			return err
		}
		var err error
		if res, err = runCreate(tx, p); err != nil {
			return err
		}
		return shared.IdempotencyFinish(tx, p.Namespace, p.Idempotency, res)
	})
	if err != nil {
		return nil, fmt.Errorf("creating run: %w", err)
	}
	return res, nil
}

func runCreate(tx *wtx, p *store.RunCreateParams) (*store.RunCreateResult, error) {
	if p.Reuse != store.ReuseRejectActive {
		latest, _, err := scanRun(tx.queryRow(sqlLatestByWorkflowID, p.Namespace, p.WorkflowID))
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return nil, err
		case p.Reuse == store.ReuseReturnExisting:
			return &store.RunCreateResult{Run: latest, Created: false}, nil
		default:
			return nil, store.WorkflowIDTakenError(p.WorkflowID, latest.ID, p.Reuse)
		}
	}
	if p.Reuse == store.ReuseRejectActive {
		switch taken, err := implicitTaken(tx, p.Namespace, p.ID, p.WorkflowID); {
		case err != nil:
			return nil, err
		case taken:
			return nil, store.WorkflowIDTakenError(p.WorkflowID, p.WorkflowID, p.Reuse)
		}
	}
	run := p.NewRun(tx.now, func(t time.Time) time.Time { return fromNS(sql.NullInt64{Int64: t.UnixNano(), Valid: true}) })
	now := run.CreatedAt
	run.Input = slices.Clone(p.Input)
	retry, err := store.RetryColumn(p.Retry)
	if err != nil {
		return nil, err
	}
	c := p.Claim
	if c != nil {
		switch err := tx.queryRow(sqlQueueRestricted, p.Namespace, p.Queue).Scan(new(int)); {
		case err == nil:
			c = nil
		case !errors.Is(err, sql.ErrNoRows):
			return nil, err
		}
	}
	var claimed *store.ClaimedRun
	if c != nil && !run.AvailableAt.After(now) {
		claimed = c.Apply(run, now)
	}
	res, err := tx.exec(sqlRunInsert, run.Namespace, run.ID, run.WorkflowID, run.Workflow,
		run.Queue, run.Priority, string(run.Status), run.Version, blob(run.Input), nsPtr(run.Deadline),
		run.AvailableAt.UnixNano(), run.Attempts, run.LeaseOwner, leaseToken(claimed),
		nsPtr(run.LeaseExpiresAt), now.UnixNano(), nsPtr(run.StartedAt), now.UnixNano(), p.ConcurrencyKey, run.TraceParent, run.PinVersion(), retry)
	if isUniqueViolation(err) {
		// Either the run ID is taken or an active run started with this
		// workflow ID has it (the partial unique index enforces the default
		// policy; implicitTaken, above, the rest of it).
		return nil, store.RunExistsError(p.ID, p.WorkflowID, p.Reuse)
	}
	if err != nil {
		return nil, err
	}
	if run.Sequence, err = res.LastInsertId(); err != nil {
		return nil, err
	}
	if len(p.History) > 0 {
		if err := writeHistory(tx, run.Sequence, p.SeedCheckpoint()); err != nil {
			return nil, fmt.Errorf("seeding history: %w", err)
		}
	}
	tx.publish(store.RunTopic(run.Namespace, run.ID))
	if claimed == nil {
		tx.publish(store.TopicReady)
	}
	return &store.RunCreateResult{Run: run, Created: true, Claimed: claimed}, nil
}

func leaseToken(c *store.ClaimedRun) int64 {
	if c == nil {
		return 0
	}
	return c.LeaseToken
}

// Run state changes by reference. Each returns the updated row.
const (
	sqlResume = `UPDATE runs SET status = 'pending', available_at = ?1, wait_reason = '',
	error = NULL, updated_at = ?1 WHERE sequence = ?2 RETURNING ` + runCols
)

// Cancellation of one unfinished run; each returns the updated row and its place
// in a parent's group (NULLs for a run that is no child).
const ()

// RunCancel implements sqlstore.Own: store.Store's RunCancel, under the payloads stored apart.
func (d seam) RunCancel(ctx context.Context, p *store.RunCancelParams) (*store.Run, error) {
	s := d.s
	if err := p.Idempotency.Validate(); err != nil {
		return nil, fmt.Errorf("cancelling run: %w", err)
	}
	var run *store.Run
	err := s.write(ctx, func(tx *wtx) error {
		if err := shared.IdempotencyBegin(tx, p.Namespace, p.Idempotency); err != nil {
			return err
		}
		var err error
		if run, err = runCancel(tx, p); err != nil {
			return err
		}
		return shared.IdempotencyFinish(tx, p.Namespace, p.Idempotency, run)
	})
	if err != nil {
		return nil, fmt.Errorf("cancelling run: %w", err)
	}
	return run, nil
}

func runCancel(tx *wtx, p *store.RunCancelParams) (*store.Run, error) {
	run, err := runByRef(context.Background(), tx, p.Namespace, p.Ref)
	if err != nil {
		return nil, err
	}
	if run.Status.Terminal() {
		return nil, fmt.Errorf("%w: run %q is %s", store.ErrRunFinished, run.ID, run.Status)
	}
	return shared.CancelRun(tx, run)
}

// RunResume implements sqlstore.Own: store.Store's RunResume, under the payloads stored apart.
func (d seam) RunResume(ctx context.Context, p *store.RunResumeParams) (*store.Run, error) {
	s := d.s
	if err := p.Idempotency.Validate(); err != nil {
		return nil, fmt.Errorf("resuming run: %w", err)
	}
	var run *store.Run
	err := s.write(ctx, func(tx *wtx) error {
		if err := shared.IdempotencyBegin(tx, p.Namespace, p.Idempotency); err != nil {
			return err
		}
		var err error
		if run, err = runResume(tx, p); err != nil {
			return err
		}
		return shared.IdempotencyFinish(tx, p.Namespace, p.Idempotency, run)
	})
	if err != nil {
		return nil, fmt.Errorf("resuming run: %w", err)
	}
	return run, nil
}

func runResume(tx *wtx, p *store.RunResumeParams) (*store.Run, error) {
	run, err := runByRef(context.Background(), tx, p.Namespace, p.Ref)
	switch {
	case err != nil:
		return nil, err
	case run.Status.Terminal():
		return nil, fmt.Errorf("%w: run %q is %s", store.ErrRunFinished, run.ID, run.Status)
	case run.Status != store.StatusBlocked:
		return nil, fmt.Errorf("%w: run %q is %s", store.ErrRunNotBlocked, run.ID, run.Status)
	}
	if run, _, err = scanRun(tx.queryRow(sqlResume, tx.now.UnixNano(), run.Sequence)); err != nil {
		return nil, err
	}
	tx.publish(store.RunTopic(run.Namespace, run.ID), store.TopicReady)
	return run, nil
}

const sqlResumeBlocked = `UPDATE runs SET status = 'pending', available_at = ?1, wait_reason = '',
	error = NULL, updated_at = ?1
	WHERE namespace = ?2 AND status = 'blocked' AND workflow IN (SELECT value FROM json_each(?3))
	AND (?4 = '[]' OR queue IN (SELECT value FROM json_each(?4)))
	RETURNING id`

// RunsResumeBlocked implements store.Store.
func (s *Store) RunsResumeBlocked(ctx context.Context, p *store.RunsResumeBlockedParams) (int, error) {
	if len(p.Workflows) == 0 {
		return 0, nil
	}
	wfs, err := jsonList(p.Workflows)
	if err != nil {
		return 0, fmt.Errorf("resuming blocked runs: %w", err)
	}
	queues, err := jsonList(append([]string{}, p.Queues...))
	if err != nil {
		return 0, fmt.Errorf("resuming blocked runs: %w", err)
	}
	var n int
	err = s.write(ctx, func(tx *wtx) error {
		var err error
		n, err = runsResumeBlocked(tx, p.Namespace, wfs, queues)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("resuming blocked runs: %w", err)
	}
	return n, nil
}

func runsResumeBlocked(tx *wtx, namespace, workflows, queues string) (int, error) {
	rows, err := tx.query(sqlResumeBlocked, tx.now.UnixNano(), namespace, workflows, queues)
	if err != nil {
		return 0, err
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return 0, err
		}
		tx.publish(store.RunTopic(namespace, id))
		n++
	}
	if n > 0 {
		tx.publish(store.TopicReady)
	}
	return n, rows.Err()
}
