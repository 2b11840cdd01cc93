package storepg

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-dev/trellis/store"
)

// Cancellation of one unfinished run ($3, whose row the transaction holds); each
// returns the updated row and its place in a parent's group.
const (
	sqlCancelRunNow = `UPDATE runs SET status = 'cancelled', error = $1, wait_reason = '',
	lease_owner = '', lease_expires_at = NULL, finished_at = $2, updated_at = $2
	WHERE sequence = $3 AND status NOT IN ('succeeded', 'failed', 'cancelled')
	RETURNING ` + runRowCols
	sqlCancelRunFlag = `UPDATE runs SET cancel_requested = true, updated_at = $1,
	available_at = CASE WHEN status = 'waiting' THEN $1 ELSE available_at END,
	wait_reason = CASE WHEN status = 'waiting' THEN '' ELSE wait_reason END,
	status = CASE WHEN status = 'waiting' THEN 'pending' ELSE status END
	WHERE sequence = $2 AND status NOT IN ('succeeded', 'failed', 'cancelled')
	RETURNING ` + runRowCols
	// sqlCancelCascade lists and locks a run's unfinished children in non-detached
	// groups, each group's last item first (so that cancelling them releases no held
	// child). Locked, a child's status cannot change before it is cancelled.
	sqlCancelCascade = `SELECT ` + runRowCols + ` FROM runs WHERE parent_seq = $1
	AND status NOT IN ('succeeded', 'failed', 'cancelled')
	AND parent_position NOT IN (SELECT position FROM child_groups WHERE parent_seq = $1 AND detached)
	ORDER BY parent_position, item DESC FOR NO KEY UPDATE`
)

// RunCancel implements store.Store. It runs in a transaction of its own: cancelling
// a parent cancels its children, recursively, and a child that ends at once is
// counted in its group (see txn.go).
func (s *Store) RunCancel(ctx context.Context, p *store.RunCancelParams) (*store.Run, error) {
	if err := p.Idempotency.Validate(); err != nil {
		return nil, fmt.Errorf("cancelling run: %w", err)
	}
	var run *store.Run
	err := s.inTx(ctx, func(tx *wtx) error {
		if err := shared.IdempotencyBegin(stx{tx}, p.Namespace, p.Idempotency); err != nil {
			return err
		}
		r, err := lockRun(tx, p.Namespace, p.Ref)
		if err != nil {
			return err
		}
		if r.Status.Terminal() {
			return fmt.Errorf("%w: run %q is %s", store.ErrRunFinished, r.ID, r.Status)
		}
		if run, err = cancelRun(tx, r); err != nil {
			return err
		}
		return shared.IdempotencyFinish(stx{tx}, p.Namespace, p.Idempotency, run)
	})
	if err != nil {
		return nil, fmt.Errorf("cancelling run: %w", err)
	}
	return run, nil
}

// cancelRun cancels an unfinished run as RunCancel does, then its children in
// non-detached groups, recursively. A child that ends at once is counted in its
// group. It returns nil when run had finished meanwhile (earlier in a cascade).
func cancelRun(tx *wtx, run *runRow) (*store.Run, error) {
	endsNow := run.Status == store.StatusBlocked || run.Status == store.StatusPending && run.Attempts == 0
	var row pgx.Row
	if endsNow {
		e, _ := errJSON(&cancelledError)
		row = tx.queryRow(sqlCancelRunNow, e, tx.now, run.Sequence)
	} else {
		row = tx.queryRow(sqlCancelRunFlag, tx.now, run.Sequence)
	}
	updated, err := scanRunRow(row)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	tx.publish(store.RunTopic(updated.Namespace, updated.ID), store.TopicReady)
	if run.Attempts > 0 { // its worker learns of the cancel now (see store.TopicCancel)
		tx.publish(store.TopicCancel)
	}
	if run.Attempts > 0 { // a run that never ran started no children
		children, err := txRunRows(tx, sqlCancelCascade, updated.Sequence)
		if err != nil {
			return nil, fmt.Errorf("listing children: %w", err)
		}
		for _, c := range children {
			if _, err := cancelRun(tx, c); err != nil {
				return nil, err
			}
		}
	}
	if endsNow && updated.parentSeq != nil {
		// A held child still has no available_at (cancelling does not set it).
		wasHeld := updated.AvailableAt.IsZero()
		if err := childEnded(tx, *updated.parentSeq, int(*updated.position), store.StatusCancelled, wasHeld); err != nil {
			return nil, err
		}
	}
	return updated.Run, nil
}

// cancelAfterCheckpoint keeps a cancellation that reached a run while it ran: a
// run that blocks ends cancelled at once (a replay would block it again), and
// children it started just now are cancelled as RunCancel would have cancelled
// them. A run that starts to wait was already handed back by its status update.
func cancelAfterCheckpoint(tx *wtx, seq int64, p *store.CheckpointParams) error {
	if p.Status == store.StatusBlocked {
		run := &runRow{Run: &store.Run{Sequence: seq, Status: store.StatusBlocked, Attempts: 1}}
		_, err := cancelRun(tx, run)
		return err
	}
	if len(p.Children) == 0 {
		return nil
	}
	children, err := txRunRows(tx, sqlCancelCascade, seq)
	if err != nil {
		return fmt.Errorf("listing children: %w", err)
	}
	for _, c := range children {
		if _, err := cancelRun(tx, c); err != nil {
			return err
		}
	}
	return nil
}
