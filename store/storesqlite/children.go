package storesqlite

import (
	"fmt"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// SQLite inserts a new group's children a row at a time; counting them as they end
// (the window, FailFast, the group's event) is sqlstore's.

const (
	sqlChildInsert = sqlstore.ChildInsert + `
	VALUES (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`
)

// parentRef identifies the parent run creating children.
type parentRef = sqlstore.Parent

// createChildren inserts a checkpoint's child groups and their runs. A taken run
// ID or an active workflow ID fails with store.ErrRunExists after writing: the
// request is then dirty and the batch is replayed with savepoints, so nothing of
// the checkpoint remains (a pre-check would cost a query on every group). A child
// given a workflow ID other than its run ID is checked against the unfinished
// run with that ID (implicitTaken), which the unique index no longer holds.
func createChildren(tx *wtx, parent parentRef, groups []*store.ChildGroup) error {
	return shared.CreateChildren(tx, parent, groups, func(g *store.ChildGroup, active int) error {
		return insertChildren(tx, parent, g, active)
	})
}

// insertChildren inserts a group's runs, the first active of them due now, the
// others held.
func insertChildren(tx *wtx, parent parentRef, g *store.ChildGroup, active int) error {
	now := tx.now.UnixNano()
	for item, r := range g.Runs {
		switch taken, err := implicitTaken(tx, parent.Namespace, r.ID, r.WorkflowID); {
		case err != nil:
			return err
		case taken:
			return fmt.Errorf("child run: %w", store.WorkflowIDTakenError(r.WorkflowID, r.WorkflowID, store.ReuseRejectActive))
		}
		avail, reason := any(now), ""
		if item >= active {
			avail, reason = nil, sqlstore.HeldReason
		}
		_, err := tx.exec(sqlChildInsert, parent.Namespace, r.ID, r.WorkflowID, r.Workflow, r.Queue,
			r.Priority, r.Version, blob(r.Input), nsPtr(r.Deadline), avail, reason, now, now,
			parent.Seq, parent.ID, g.Position, item, r.TraceParent)
		if isUniqueViolation(err) {
			return fmt.Errorf("child run: %w", store.RunExistsError(r.ID, r.WorkflowID, store.ReuseRejectActive))
		}
		if err != nil {
			return fmt.Errorf("creating child run %q: %w", r.ID, err)
		}
	}
	return nil
}

// childEnded counts a child that reached status (final) in its group, in the
// transaction that ended it (sqlstore.SQL.ChildEnded).
func childEnded(tx *wtx, parentSeq int64, position int, status store.Status, wasHeld bool) error {
	return shared.ChildEnded(tx, parentSeq, position, status, wasHeld)
}

// CancelGroup implements sqlstore.Tx.
func (tx *wtx) CancelGroup(parentSeq int64, position int) error {
	return shared.CancelGroup(tx, parentSeq, position)
}
