package storepg

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/trellis-dev/trellis/store"
)

// heldReason is the wait reason of a child held back by its group's MaxConcurrency.
// A held child is pending with no available_at (never due) until released.
const heldReason = "held: group at max concurrency"

var (
	// sqlChildrenInsert creates a group's children in one statement, from column
	// arrays in item order; the children past the first $14 are held (no
	// available_at). A taken run ID or an active workflow ID is a unique violation,
	// which fails the checkpoint's transaction (store.ErrRunExists).
	sqlChildrenInsert = `INSERT INTO runs (namespace, id, workflow_id, workflow, queue, priority,
	status, version, input, deadline, available_at, wait_reason, created_at, updated_at,
	parent_seq, parent_id, parent_position, item)
	SELECT $1, c.id, c.workflow_id, c.workflow, c.queue, c.priority, 'pending', c.version, c.input,
		c.deadline, CASE WHEN c.n <= $14 THEN $2::timestamptz END,
		CASE WHEN c.n <= $14 THEN '' ELSE '` + heldReason + `' END, $2, $2, $3, $4, $5, (c.n - 1)::int4
	FROM unnest($6::text[], $7::text[], $8::text[], $9::text[], $10::int4[], $11::int4[], $12::bytea[],
		$13::timestamptz[]) WITH ORDINALITY AS c(id, workflow_id, workflow, queue, priority, version, input,
		deadline, n)`
	sqlGroupInsert = `INSERT INTO child_groups (parent_seq, position, max_concurrency, fail_fast,
	detached, total, active, held, next_item) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`
	// sqlGroupCount counts children that ended: $3 succeeded, $4 failed, $5
	// cancelled, of which $6 were active and $7 held.
	sqlGroupCount = `UPDATE child_groups SET succeeded = succeeded + $3, failed = failed + $4,
	cancelled = cancelled + $5, active = active - $6, held = held - $7
	WHERE parent_seq = $1 AND position = $2
	RETURNING max_concurrency, fail_fast, detached, total, active, held, next_item,
	succeeded, failed, cancelled, ended`
	// sqlReleaseHeld releases up to $5 held children of a group, from item $4 on,
	// in item order. The children are found and locked in the materialized CTE,
	// through runs_children, and updated by sequence: with filters on the updated
	// rows themselves, the planner of a table without statistics may walk every held
	// run (runs_pending_available) and probe the children for each, ~100 ms with
	// 10,000 held children instead of well under one.
	sqlReleaseHeld = `WITH picked AS MATERIALIZED (
		SELECT sequence FROM runs WHERE parent_seq = $2 AND parent_position = $3
		AND item >= $4 AND status = 'pending' AND available_at IS NULL
		ORDER BY item LIMIT $5 FOR NO KEY UPDATE)
	UPDATE runs r SET available_at = $1, wait_reason = '', updated_at = $1
	FROM picked WHERE r.sequence = picked.sequence
	RETURNING r.item, r.namespace, r.id`
	sqlGroupReleased = `UPDATE child_groups SET active = active + $3, held = held - $3,
	next_item = $4 WHERE parent_seq = $1 AND position = $2`
	sqlGroupFail = `UPDATE child_groups SET ended = true WHERE parent_seq = $1 AND position = $2`
	sqlGroupEnd  = `UPDATE child_groups SET ended = true WHERE parent_seq = $1 AND position = $2
	RETURNING detached, total, succeeded, failed, cancelled`
	// sqlGroupUnfinished lists and locks a group's unfinished children, last item
	// first (so that cancelling them releases no held child).
	sqlGroupUnfinished = `SELECT ` + runRowCols + ` FROM runs WHERE parent_seq = $1
	AND parent_position = $2 AND status NOT IN ('succeeded', 'failed', 'cancelled')
	ORDER BY item DESC FOR NO KEY UPDATE`
)

// parentRef identifies the parent run creating children.
type parentRef struct {
	seq       int64
	namespace string
	id        string
}

// childCols are a group's children as column arrays.
type childCols struct {
	ids, wfIDs, wfs, queues []string
	prio, version           []int32
	inputs                  [][]byte
	deadlines               []pgtype.Timestamptz
}

func newChildCols(runs []*store.RunCreateParams) *childCols {
	c := &childCols{}
	for _, r := range runs {
		c.ids, c.wfIDs = append(c.ids, r.ID), append(c.wfIDs, r.WorkflowID)
		c.wfs, c.queues = append(c.wfs, r.Workflow), append(c.queues, r.Queue)
		c.prio, c.version = append(c.prio, int32(r.Priority)), append(c.version, int32(r.Version))
		c.inputs, c.deadlines = append(c.inputs, r.Input), append(c.deadlines, tsArg(timePtrArg(r.Deadline)))
	}
	return c
}

// createChildren inserts a checkpoint's child groups and their runs, one statement
// per group however many children it has.
func createChildren(tx *wtx, parent parentRef, groups []*store.ChildGroup) error {
	for _, g := range groups {
		active := len(g.Runs)
		if g.MaxConcurrency > 0 {
			active = min(active, g.MaxConcurrency)
		}
		c := newChildCols(g.Runs)
		_, err := tx.exec(sqlChildrenInsert, parent.namespace, tx.now, parent.seq, parent.id, g.Position,
			c.ids, c.wfIDs, c.wfs, c.queues, c.prio, c.version, c.inputs, c.deadlines, active)
		if isUniqueViolation(err) {
			return fmt.Errorf("%w: a child run of group %d, or an active run with its workflow ID", store.ErrRunExists, g.Position)
		}
		if err != nil {
			return fmt.Errorf("creating child runs of group %d: %w", g.Position, err)
		}
		for _, r := range g.Runs {
			tx.publish(store.RunTopic(parent.namespace, r.ID))
		}
		_, err = tx.exec(sqlGroupInsert, parent.seq, g.Position, g.MaxConcurrency, g.FailFast,
			g.Detached, len(g.Runs), active, len(g.Runs)-active, active)
		if isUniqueViolation(err) {
			return fmt.Errorf("%w: Children: a group at position %d exists", store.ErrInvalidParams, g.Position)
		}
		if err != nil {
			return fmt.Errorf("creating child group %d: %w", g.Position, err)
		}
	}
	tx.publish(store.TopicReady)
	return nil
}

// group is a child group's state after a child ended.
type group struct {
	maxConcurrency, total, active, held, nextItem int
	failFast, detached, ended                     bool
	outcome                                       store.GroupOutcome
}

// childEnded counts a child that reached status (final) in its group, in the
// transaction that ended it. wasHeld says the child never left the held state.
func childEnded(tx *wtx, parentSeq int64, position int, status store.Status, wasHeld bool) error {
	var d groupDelta
	d.count(status)
	if wasHeld {
		d.held = 1
	} else {
		d.active = 1
	}
	return countEnded(tx, parentSeq, position, d)
}

// countEnded counts children of a group that ended in this transaction (d): it
// releases held children, applies FailFast, and tells the parent when the group
// ends. Several children count as if they had ended one after the other, the
// failed and cancelled ones last.
func countEnded(tx *wtx, parentSeq int64, position int, d groupDelta) error {
	var g group
	err := tx.queryRow(sqlGroupCount, parentSeq, position, d.succeeded, d.failed, d.cancelled,
		d.active, d.held).Scan(
		&g.maxConcurrency, &g.failFast, &g.detached, &g.total, &g.active, &g.held, &g.nextItem,
		&g.outcome.Succeeded, &g.outcome.Failed, &g.outcome.Cancelled, &g.ended)
	if err != nil {
		return fmt.Errorf("counting children in group %d: %w", position, err)
	}
	switch {
	case g.ended:
		return nil
	case g.failFast && d.failed+d.cancelled > 0:
		return failGroup(tx, parentSeq, position)
	}
	if g.held > 0 && g.active < g.maxConcurrency {
		if err := releaseHeld(tx, parentSeq, position, &g); err != nil {
			return err
		}
	}
	if g.outcome.Succeeded+g.outcome.Failed+g.outcome.Cancelled == g.total {
		return endGroup(tx, parentSeq, position)
	}
	return nil
}

// releaseHeld makes due as many held children as the group's cap allows, in item
// order.
func releaseHeld(tx *wtx, parentSeq int64, position int, g *group) error {
	rows, err := tx.query(sqlReleaseHeld, tx.now, parentSeq, position, g.nextItem, g.maxConcurrency-g.active)
	if err != nil {
		return fmt.Errorf("releasing held children: %w", err)
	}
	n, next := 0, g.nextItem
	var topics []string
	for rows.Next() {
		var (
			item          int
			namespace, id string
		)
		if err := rows.Scan(&item, &namespace, &id); err != nil {
			rows.Close()
			return fmt.Errorf("releasing held children: %w", err)
		}
		n, next = n+1, max(next, item+1)
		topics = append(topics, store.RunTopic(namespace, id))
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("releasing held children: %w", err)
	}
	if n == 0 {
		return nil
	}
	if _, err := tx.exec(sqlGroupReleased, parentSeq, position, n, next); err != nil {
		return fmt.Errorf("releasing held children: %w", err)
	}
	tx.publish(append(topics, store.TopicReady)...)
	return nil
}

// failGroup ends a FailFast group at its first failure: it marks the group ended
// (so that the cancellations below neither release nor notify), cancels the
// unfinished children as RunCancel does, and tells the parent.
func failGroup(tx *wtx, parentSeq int64, position int) error {
	if _, err := tx.exec(sqlGroupFail, parentSeq, position); err != nil {
		return fmt.Errorf("ending group %d: %w", position, err)
	}
	runs, err := txRunRows(tx, sqlGroupUnfinished, parentSeq, position)
	if err != nil {
		return fmt.Errorf("listing children of group %d: %w", position, err)
	}
	for _, r := range runs {
		if _, err := cancelRun(tx, r); err != nil {
			return err
		}
	}
	return endGroup(tx, parentSeq, position)
}

// endGroup marks a group ended and, unless it is detached, adds its GroupEvent to
// the parent's inbox (when the parent has not finished), waking the parent if it
// waits for it.
func endGroup(tx *wtx, parentSeq int64, position int) error {
	var (
		detached bool
		out      store.GroupOutcome
	)
	err := tx.queryRow(sqlGroupEnd, parentSeq, position).Scan(&detached, &out.Total, &out.Succeeded,
		&out.Failed, &out.Cancelled)
	if err != nil {
		return fmt.Errorf("ending group %d: %w", position, err)
	}
	if detached {
		return nil
	}
	payload, err := json.Marshal(out)
	if err != nil {
		return err
	}
	return shared.DeliverIfActive(stx{tx}, parentSeq, store.GroupEvent(position), payload)
}

// txRunRows runs a query of runRowCols in the transaction and returns every row
// (read to the end before the caller runs other statements).
func txRunRows(tx *wtx, query string, args ...any) ([]*runRow, error) {
	rows, err := tx.query(query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []*runRow
	for rows.Next() {
		r, err := scanRunRow(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// RunChildren implements store.Store.
func (s *Store) RunChildren(ctx context.Context, p *store.RunChildrenParams) ([]*store.Run, error) {
	if s.closed() {
		return nil, fmt.Errorf("listing children: %w", store.ErrClosed)
	}
	var runs []*store.Run
	err := s.read(ctx, func() (err error) {
		runs, err = shared.RunChildren(s.reads(ctx), p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing children: %w", s.readErr(err))
	}
	return runs, nil
}
