package sqlstore

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

// CancelledError is the Error of a run cancelled before a worker could see it.
var CancelledError = store.ErrorInfo{Message: "run cancelled", Type: "cancelled"}

// cancelQueries are the statements of cancellation, in the dialect's style.
type cancelQueries struct {
	now, flag, cascade, groupUnfinished string
}

func newCancelQueries(d Dialect) cancelQueries {
	r := d.rebind
	const unfinished = `status NOT IN ('succeeded', 'failed', 'cancelled')`
	const ret = ` RETURNING ` + RunCols + `, parent_seq, parent_position`
	return cancelQueries{
		// now ends an unfinished run ($3) cancelled at once.
		now: r(`UPDATE runs SET status = 'cancelled', error = $1, wait_reason = '',
	lease_owner = '', lease_expires_at = NULL, finished_at = $2, updated_at = $2
	WHERE sequence = $3 AND ` + unfinished + ret),
		// flag requests the cancellation of an unfinished run ($2); a waiting one
		// is made pending, due now, so that a worker ends it.
		flag: r(`UPDATE runs SET cancel_requested = true, updated_at = $1,
	available_at = CASE WHEN status = 'waiting' THEN $1 ELSE available_at END,
	wait_reason = CASE WHEN status = 'waiting' THEN '' ELSE wait_reason END,
	status = CASE WHEN status = 'waiting' THEN 'pending' ELSE status END
	WHERE sequence = $2 AND ` + unfinished + ret),
		// cascade lists (and locks, where the dialect must) a run's unfinished
		// children in non-detached groups, each group's last item first, so that
		// cancelling them releases no held child. It locks them in sequence order,
		// the order in which a batch of checkpoints locks runs (lockInOrder in
		// storepg): locking them last item first, a cancellation and a batch of
		// the children's checkpoints each held a child the other waited for.
		cascade: r(`WITH l AS MATERIALIZED (SELECT ` + RunCols + `, parent_position, item FROM runs
	WHERE parent_seq = $1 AND ` + unfinished + `
	AND parent_position NOT IN (SELECT position FROM child_groups WHERE parent_seq = $1 AND detached = true)
	ORDER BY sequence` + d.Lock() + `)
	SELECT ` + RunCols + ` FROM l ORDER BY parent_position, item DESC`),
		// groupUnfinished lists (and locks, in sequence order) a group's
		// unfinished children, last item first.
		groupUnfinished: r(`WITH l AS MATERIALIZED (SELECT ` + RunCols + `, item FROM runs
	WHERE parent_seq = $1 AND parent_position = $2 AND ` + unfinished + ` ORDER BY sequence` + d.Lock() + `)
	SELECT ` + RunCols + ` FROM l ORDER BY item DESC`),
	}
}

// CancelRun cancels an unfinished run as RunCancel does (run's Sequence, Status and
// Attempts are read), then its children in non-detached groups, recursively. A run
// that never ran or is blocked ends cancelled at once and is counted in its group;
// any other is flagged, and a waiting one made pending so that a worker ends it.
// It returns nil when the run had finished meanwhile (earlier in a cascade).
func (s *SQL) CancelRun(tx Tx, run *store.Run) (*store.Run, error) {
	endsNow := run.Status == store.StatusBlocked || run.Status == store.StatusPending && run.Attempts == 0
	var row Scanner
	if endsNow {
		e, err := ErrJSON(&CancelledError)
		if err != nil {
			return nil, err
		}
		row = tx.QueryRow(s.cq.now, e, s.d.Time(tx.Now()), run.Sequence)
	} else {
		row = tx.QueryRow(s.cq.flag, s.d.Time(tx.Now()), run.Sequence)
	}
	var parentSeq, position sql.NullInt64
	updated, _, err := ScanRun(Suffixed{Row: row, Rest: []any{&parentSeq, &position}})
	if errors.Is(err, ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	tx.Publish(store.RunTopic(updated.Namespace, updated.ID), store.TopicReady)
	if endsNow {
		if err := s.StreamAppend(tx, updated.Sequence, updated.Namespace, updated.ID,
			[]store.StreamWrite{CancelledEvent()}); err != nil {
			return nil, err
		}
	}
	if run.Attempts > 0 { // it ran: its worker learns now (store.TopicCancel), its children end
		tx.Publish(store.TopicCancel)
		if err := s.cancelEach(tx, s.cq.cascade, updated.Sequence); err != nil {
			return nil, err
		}
	}
	if endsNow && parentSeq.Valid {
		// A held child still has no available_at (cancelling does not set it).
		wasHeld := updated.AvailableAt.IsZero()
		if err := s.ChildEnded(tx, parentSeq.Int64, int(position.Int64), store.StatusCancelled, wasHeld); err != nil {
			return nil, err
		}
	}
	return updated, nil
}

// CancelGroup cancels the unfinished children of a group (parent sequence,
// position), the last item first, so that cancelling them releases no held child.
func (s *SQL) CancelGroup(tx Tx, parentSeq int64, position int) error {
	if err := s.cancelEach(tx, s.cq.groupUnfinished, parentSeq, position); err != nil {
		return fmt.Errorf("cancelling children of group %d: %w", position, err)
	}
	return nil
}

// CancelAfterCheckpoint keeps a cancellation that reached a run (seq) while it
// ran: a run that blocks ends cancelled at once (a replay would block it again),
// and children it started just now are cancelled as RunCancel would have
// cancelled them. A run that starts to wait was already handed back by the
// checkpoint's status update.
func (s *SQL) CancelAfterCheckpoint(tx Tx, seq int64, p *store.CheckpointParams) error {
	if p.Status == store.StatusBlocked {
		_, err := s.CancelRun(tx, &store.Run{Sequence: seq, Status: store.StatusBlocked, Attempts: 1})
		return err
	}
	if len(p.Children) == 0 {
		return nil
	}
	return s.cancelEach(tx, s.cq.cascade, seq)
}

// cancelEach cancels every run query lists (read whole before the first update).
func (s *SQL) cancelEach(tx Tx, query string, args ...any) error {
	runs, err := Runs(tx, query, args...)
	if err != nil {
		return fmt.Errorf("listing runs to cancel: %w", err)
	}
	for _, r := range runs {
		if _, err := s.CancelRun(tx, r); err != nil {
			return err
		}
	}
	return nil
}
