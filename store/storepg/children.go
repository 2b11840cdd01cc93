package storepg

import (
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// The state machine of child groups is sqlstore's (CountEnded). Postgres inserts a
// group's children with one statement, and cancels a failed group's children here.

var (
	// sqlChildrenInsert creates a group's children in one statement, from column
	// arrays in item order; the children past the first $14 are held (no
	// available_at). A taken run ID or an active workflow ID is a unique violation,
	// which fails the checkpoint's transaction (store.ErrRunExists); so is a child
	// that implicitFree leaves out (createChildren counts the rows).
	sqlChildrenInsert = sqlstore.ChildInsert + `
	SELECT $1, c.id, c.workflow_id, c.workflow, c.queue, c.priority, 'pending', c.version, c.input,
		c.deadline, CASE WHEN c.n <= $14 THEN $2::timestamptz END,
		CASE WHEN c.n <= $14 THEN '' ELSE '` + sqlstore.HeldReason + `' END, $2, $2, $3, $4, $5, (c.n - 1)::int4,
		c.trace_parent
	FROM unnest($6::text[], $7::text[], $8::text[], $9::text[], $10::int4[], $11::int4[], $12::bytea[],
		$13::timestamptz[], $15::text[]) WITH ORDINALITY AS c(id, workflow_id, workflow, queue, priority, version, input,
		deadline, trace_parent, n)
	WHERE ` + implicitFree("$1", "c.id", "c.workflow_id")
)

// parentRef identifies the parent run creating children.
type parentRef = sqlstore.Parent

// childCols are a group's children as column arrays.
type childCols struct {
	ids, wfIDs, wfs, queues []string
	traceParents            []string
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
		c.traceParents = append(c.traceParents, r.TraceParent)
	}
	return c
}

// createChildren inserts a checkpoint's child groups and their runs, one statement
// per group however many children it has.
func createChildren(tx *wtx, parent parentRef, groups []*store.ChildGroup) error {
	return shared.CreateChildren(stx{tx}, parent, groups, func(g *store.ChildGroup, active int) error {
		c := newChildCols(g.Runs)
		tag, err := tx.exec(sqlChildrenInsert, parent.Namespace, tx.now, parent.Seq, parent.ID, g.Position,
			c.ids, c.wfIDs, c.wfs, c.queues, c.prio, c.version, c.inputs, c.deadlines, active, c.traceParents)
		if isUniqueViolation(err) || err == nil && tag.RowsAffected() != int64(len(g.Runs)) {
			return fmt.Errorf("%w: a child run of group %d, or an active run with its workflow ID", store.ErrRunExists, g.Position)
		}
		if err != nil {
			return fmt.Errorf("creating child runs of group %d: %w", g.Position, err)
		}
		return nil
	})
}

// childEnded counts a child that reached status (final) in its group, in the
// transaction that ended it (sqlstore.SQL.ChildEnded).
func childEnded(tx *wtx, parentSeq int64, position int, status store.Status, wasHeld bool) error {
	return shared.ChildEnded(stx{tx}, parentSeq, position, status, wasHeld)
}

// countEnded counts children of a group that ended in this transaction
// (sqlstore.SQL.CountEnded).
func countEnded(tx *wtx, parentSeq int64, position int, d groupDelta) error {
	return shared.CountEnded(stx{tx}, parentSeq, position, d)
}

// CancelGroup implements sqlstore.Tx.
func (s stx) CancelGroup(parentSeq int64, position int) error {
	return shared.CancelGroup(s, parentSeq, position)
}
