package storesqlite

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// heldReason is the wait reason of a child held back by its group's MaxConcurrency.
// A held child is pending with no available_at (never due) until released.
const heldReason = "held: group at max concurrency"

const (
	sqlChildInsert = `INSERT INTO runs (namespace, id, workflow_id, workflow, queue, priority,
	status, version, input, deadline, available_at, wait_reason, created_at, updated_at,
	parent_seq, parent_id, parent_position, item)
	VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
	sqlGroupInsert = `INSERT INTO child_groups (parent_seq, position, max_concurrency, fail_fast,
	detached, total, active, held, next_item) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`
	// sqlGroupCount counts a child (status ?3) that ended; ?4 is 1 when it was
	// held, 0 when it was active.
	sqlGroupCount = `UPDATE child_groups SET succeeded = succeeded + (?3 = 'succeeded'),
	failed = failed + (?3 = 'failed'), cancelled = cancelled + (?3 = 'cancelled'),
	active = active - (1 - ?4), held = held - ?4
	WHERE parent_seq = ?1 AND position = ?2
	RETURNING max_concurrency, fail_fast, detached, total, active, held, next_item,
	succeeded, failed, cancelled, ended`
	// sqlReleaseHeld releases up to ?5 held children of a group, from item ?4 on,
	// in item order.
	sqlReleaseHeld = `UPDATE runs SET available_at = ?1, wait_reason = '', updated_at = ?1
	WHERE sequence IN (SELECT sequence FROM runs WHERE parent_seq = ?2 AND parent_position = ?3
	AND item >= ?4 AND status = 'pending' AND available_at IS NULL ORDER BY item LIMIT ?5)
	RETURNING item, namespace, id`
	sqlGroupReleased = `UPDATE child_groups SET active = active + ?3, held = held - ?3,
	next_item = ?4 WHERE parent_seq = ?1 AND position = ?2`
	sqlGroupEnd = `UPDATE child_groups SET ended = 1 WHERE parent_seq = ?1 AND position = ?2
	RETURNING detached, total, succeeded, failed, cancelled`
	// sqlGroupUnfinished lists a group's unfinished children, last item first (so
	// that cancelling them releases no held child).
	sqlGroupUnfinished = `SELECT ` + runCols + ` FROM runs WHERE parent_seq = ?1
	AND parent_position = ?2 AND status NOT IN ('succeeded', 'failed', 'cancelled')
	ORDER BY item DESC`
)

// parentRef identifies the parent run creating children.
type parentRef struct {
	seq       int64
	namespace string
	id        string
}

// createChildren inserts a checkpoint's child groups and their runs. A taken run
// ID or an active workflow ID fails with store.ErrRunExists after writing: the
// request is then dirty and the batch is replayed with savepoints, so nothing of
// the checkpoint remains (a pre-check would cost a query on every group).
func createChildren(tx *wtx, parent parentRef, groups []*store.ChildGroup) error {
	now := tx.now.UnixNano()
	released := false
	for _, g := range groups {
		active := len(g.Runs)
		if g.MaxConcurrency > 0 {
			active = min(active, g.MaxConcurrency)
		}
		for item, r := range g.Runs {
			avail, reason := any(now), ""
			if item >= active {
				avail, reason = nil, heldReason
			}
			_, err := tx.exec(sqlChildInsert, parent.namespace, r.ID, r.WorkflowID, r.Workflow, r.Queue,
				r.Priority, r.Version, blob(r.Input), nsPtr(r.Deadline), avail, reason, now, now,
				parent.seq, parent.id, g.Position, item)
			if isUniqueViolation(err) {
				return fmt.Errorf("%w: child run %q or an active run with workflow ID %q", store.ErrRunExists, r.ID, r.WorkflowID)
			}
			if err != nil {
				return fmt.Errorf("creating child run %q: %w", r.ID, err)
			}
			tx.publish(store.RunTopic(parent.namespace, r.ID))
		}
		_, err := tx.exec(sqlGroupInsert, parent.seq, g.Position, g.MaxConcurrency, boolInt(g.FailFast),
			boolInt(g.Detached), len(g.Runs), active, len(g.Runs)-active, active)
		if isUniqueViolation(err) {
			return fmt.Errorf("%w: Children: a group at position %d exists", store.ErrInvalidParams, g.Position)
		}
		if err != nil {
			return fmt.Errorf("creating child group %d: %w", g.Position, err)
		}
		released = true
	}
	if released {
		tx.publish(store.TopicReady)
	}
	return nil
}

// group is a child group's state after a child ended.
type group struct {
	maxConcurrency, total, active, held, nextItem int
	failFast, detached, ended                     bool
	outcome                                       store.GroupOutcome
}

// childEnded counts a child that reached status (final) in its group, in the
// transaction that ended it: it releases held children, applies FailFast, and
// tells the parent when the group ends. wasHeld says the child never left the
// held state.
func childEnded(tx *wtx, parentSeq int64, position int, status store.Status, wasHeld bool) error {
	var g group
	err := tx.queryRow(sqlGroupCount, parentSeq, position, string(status), boolInt(wasHeld)).Scan(
		&g.maxConcurrency, &g.failFast, &g.detached, &g.total, &g.active, &g.held, &g.nextItem,
		&g.outcome.Succeeded, &g.outcome.Failed, &g.outcome.Cancelled, &g.ended)
	if err != nil {
		return fmt.Errorf("counting child in group %d: %w", position, err)
	}
	switch {
	case g.ended:
		return nil
	case g.failFast && status != store.StatusSucceeded:
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
	rows, err := tx.query(sqlReleaseHeld, tx.now.UnixNano(), parentSeq, position, g.nextItem,
		g.maxConcurrency-g.active)
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
	if err := rows.Close(); err != nil {
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
	if _, err := tx.exec(`UPDATE child_groups SET ended = 1 WHERE parent_seq = ?1 AND position = ?2`,
		parentSeq, position); err != nil {
		return fmt.Errorf("ending group %d: %w", position, err)
	}
	runs, err := txRuns(tx, sqlGroupUnfinished, parentSeq, position)
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
	return shared.DeliverIfActive(tx, parentSeq, store.GroupEvent(position), payload)
}

// RunChildren implements store.Store.
func (s *Store) RunChildren(ctx context.Context, p *store.RunChildrenParams) ([]*store.Run, error) {
	if s.closed() {
		return nil, fmt.Errorf("listing children: %w", store.ErrClosed)
	}
	runs, err := shared.RunChildren(s.readQ(ctx), p)
	if err != nil {
		return nil, fmt.Errorf("listing children: %w", s.readErr(err))
	}
	return runs, nil
}
