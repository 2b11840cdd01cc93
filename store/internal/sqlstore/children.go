package sqlstore

import (
	"encoding/json"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// HeldReason is the wait reason of a child held back by its group's
// MaxConcurrency. A held child is pending with no available_at (never due) until
// released.
const HeldReason = "held: group at max concurrency"

// ChildInsert begins the statement that inserts child runs, which each driver
// completes with its VALUES or SELECT: a held child (item at or past the group's
// active count) has no available_at and the wait reason HeldReason.
const ChildInsert = `INSERT INTO runs (namespace, id, workflow_id, workflow, queue, priority,
	status, version, input, deadline, available_at, wait_reason, created_at, updated_at,
	parent_seq, parent_id, parent_position, item, trace_parent)`

// Parent identifies the parent run creating children.
type Parent struct {
	Seq       int64
	Namespace string
	ID        string
}

// Active is how many of a new group's children start released: all of them, or
// the first MaxConcurrency. The others are held.
func Active(g *store.ChildGroup) int {
	if g.MaxConcurrency > 0 {
		return min(len(g.Runs), g.MaxConcurrency)
	}
	return len(g.Runs)
}

// CreateChildren inserts a checkpoint's child groups: for each, insertRuns writes
// its runs in the driver's way (the first active of them due now, the others
// held: no available_at, wait reason HeldReason), then the group's row.
func (s *SQL) CreateChildren(tx Tx, parent Parent, groups []*store.ChildGroup,
	insertRuns func(g *store.ChildGroup, active int) error) error {
	for _, g := range groups {
		active := Active(g)
		if err := insertRuns(g, active); err != nil {
			return err
		}
		for _, r := range g.Runs {
			tx.Publish(store.RunTopic(parent.Namespace, r.ID))
		}
		_, err := tx.Exec(s.q.groupInsert, parent.Seq, g.Position, g.MaxConcurrency, g.FailFast,
			g.Detached, len(g.Runs), active, len(g.Runs)-active, active)
		if s.d.IsUniqueViolation(err) {
			return fmt.Errorf("%w: Children: a group at position %d exists", store.ErrInvalidParams, g.Position)
		}
		if err != nil {
			return fmt.Errorf("creating child group %d: %w", g.Position, err)
		}
	}
	if len(groups) > 0 {
		tx.Publish(store.TopicReady)
	}
	return nil
}

// GroupDelta is what a transaction changes in a group's counters: the children
// it ended by final state, and how many of them were active or held.
type GroupDelta struct {
	Succeeded, Failed, Cancelled, Active, Held int
}

// Count counts a child that ended with status.
func (d *GroupDelta) Count(status store.Status) {
	switch status {
	case store.StatusSucceeded:
		d.Succeeded++
	case store.StatusFailed:
		d.Failed++
	case store.StatusCancelled:
		d.Cancelled++
	}
}

// group is a child group's state after children ended.
type group struct {
	maxConcurrency, total, active, held, nextItem int
	failFast, detached, ended                     bool
	outcome                                       store.GroupOutcome
}

// ChildEnded counts a child that reached status (final) in its group, in the
// transaction that ended it. wasHeld says the child never left the held state.
func (s *SQL) ChildEnded(tx Tx, parentSeq int64, position int, status store.Status, wasHeld bool) error {
	var d GroupDelta
	d.Count(status)
	if wasHeld {
		d.Held = 1
	} else {
		d.Active = 1
	}
	return s.CountEnded(tx, parentSeq, position, d)
}

// CountEnded counts children of a group that ended in this transaction (d): it
// releases held children, applies FailFast, and tells the parent when the group
// ends. Several children count as if they had ended one after the other, the
// failed and cancelled ones last.
func (s *SQL) CountEnded(tx Tx, parentSeq int64, position int, d GroupDelta) error {
	var g group
	err := tx.QueryRow(s.q.groupCount, parentSeq, position, d.Succeeded, d.Failed, d.Cancelled,
		d.Active, d.Held).Scan(
		&g.maxConcurrency, &g.failFast, &g.detached, &g.total, &g.active, &g.held, &g.nextItem,
		&g.outcome.Succeeded, &g.outcome.Failed, &g.outcome.Cancelled, &g.ended)
	if err != nil {
		return fmt.Errorf("counting children in group %d: %w", position, err)
	}
	switch {
	case g.ended:
		return nil
	case g.failFast && d.Failed+d.Cancelled > 0:
		return s.failGroup(tx, parentSeq, position)
	}
	if g.held > 0 && g.active < g.maxConcurrency {
		if err := s.releaseHeld(tx, parentSeq, position, &g); err != nil {
			return err
		}
	}
	if g.outcome.Succeeded+g.outcome.Failed+g.outcome.Cancelled == g.total {
		return s.endGroup(tx, parentSeq, position)
	}
	return nil
}

// releaseHeld makes due as many held children as the group's cap allows, in item
// order.
func (s *SQL) releaseHeld(tx Tx, parentSeq int64, position int, g *group) error {
	n, next := 0, g.nextItem
	var topics []string
	err := tx.Query(s.q.releaseHeld, []any{s.d.Time(tx.Now()), parentSeq, position, g.nextItem,
		g.maxConcurrency - g.active}, func(row Scanner) error {
		var (
			item          int
			namespace, id string
		)
		if err := row.Scan(&item, &namespace, &id); err != nil {
			return err
		}
		n, next = n+1, max(next, item+1)
		topics = append(topics, store.RunTopic(namespace, id))
		return nil
	})
	if err != nil {
		return fmt.Errorf("releasing held children: %w", err)
	}
	if n == 0 {
		return nil
	}
	if _, err := tx.Exec(s.q.groupReleased, parentSeq, position, n, next); err != nil {
		return fmt.Errorf("releasing held children: %w", err)
	}
	tx.Publish(append(topics, store.TopicReady)...)
	return nil
}

// failGroup ends a FailFast group at its first failure: it marks the group ended
// (so that the cancellations below neither release nor notify), cancels the
// unfinished children as RunCancel does, and tells the parent.
func (s *SQL) failGroup(tx Tx, parentSeq int64, position int) error {
	if _, err := tx.Exec(s.q.groupFail, parentSeq, position); err != nil {
		return fmt.Errorf("ending group %d: %w", position, err)
	}
	if err := tx.CancelGroup(parentSeq, position); err != nil {
		return err
	}
	return s.endGroup(tx, parentSeq, position)
}

// endGroup marks a group ended and, unless it is detached, adds its GroupEvent to
// the parent's inbox (when the parent has not finished), waking the parent if it
// waits for it.
func (s *SQL) endGroup(tx Tx, parentSeq int64, position int) error {
	var (
		detached bool
		out      store.GroupOutcome
	)
	err := tx.QueryRow(s.q.groupEnd, parentSeq, position).Scan(&detached, &out.Total, &out.Succeeded,
		&out.Failed, &out.Cancelled)
	if err != nil {
		return fmt.Errorf("ending group %d: %w", position, err)
	}
	if detached {
		return nil
	}
	payload, err := json.Marshal(out)
	if err != nil {
		return fmt.Errorf("encoding group outcome: %w", err)
	}
	return s.DeliverIfActive(tx, parentSeq, store.GroupEvent(position), payload)
}
