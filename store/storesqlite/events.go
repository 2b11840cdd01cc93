package storesqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/trellis-dev/trellis/store"
)

const (
	// sqlWakeIfInbox makes pending a run (?2) just checkpointed waiting when its
	// inbox already holds an event its wait_events name.
	sqlWakeIfInbox = `UPDATE runs SET status = 'pending', available_at = ?1, wait_reason = '',
	updated_at = ?1 WHERE sequence = ?2 AND status = 'waiting' AND EXISTS (SELECT 1 FROM events
	WHERE run_seq = ?2 AND name IN (SELECT value FROM json_each(wait_events)))`
	// sqlEventsConsume deletes consumed events (?2, a JSON list of Seqs) of a run (?1).
	sqlEventsConsume = `DELETE FROM events WHERE run_seq = ?1 AND seq IN (SELECT value FROM json_each(?2))`
	// sqlEventsAny reports whether the inbox of run (?1 namespace, ?2 ID) holds an
	// event named in ?3 other than those of ?4 (JSON lists).
	sqlEventsAny = `SELECT EXISTS (SELECT 1 FROM events WHERE run_seq =
	(SELECT sequence FROM runs WHERE namespace = ?1 AND id = ?2)
	AND name IN (SELECT value FROM json_each(?3)) AND seq NOT IN (SELECT value FROM json_each(?4)))`
	// sqlInboxes returns the inboxes of runs (?1, a JSON list of sequences).
	sqlInboxes = `SELECT seq, run_seq, name, payload, sent_at FROM events
	WHERE run_seq IN (SELECT value FROM json_each(?1)) ORDER BY seq`
)

// EventSend implements sqlstore.Own: store.Store's EventSend, under the payloads stored apart.
func (d seam) EventSend(ctx context.Context, p *store.EventSendParams) (*store.EventSendResult, error) {
	s := d.s
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("sending event: %w", err)
	}
	var res *store.EventSendResult
	err := s.write(ctx, func(tx *wtx) error {
		if err := shared.IdempotencyBegin(tx, p.Namespace, p.Idempotency); err != nil {
			return err
		}
		run, err := runByRef(context.Background(), tx, p.Namespace, p.Ref)
		if err != nil {
			return err
		}
		if run.Status.Terminal() {
			return fmt.Errorf("%w: run %q is %s", store.ErrRunFinished, run.ID, run.Status)
		}
		ev := &store.Event{Namespace: run.Namespace, RunID: run.ID, Name: p.Name, Payload: slices.Clone(p.Payload)}
		var woken bool
		ev.SentAt = tx.now
		if ev.Seq, woken, err = shared.Deliver(tx, run.Sequence, p.Name, p.Payload); err != nil {
			return err
		}
		res = &store.EventSendResult{Event: ev}
		if c := p.Claim; woken && c != nil && c.Takes(run) {
			claimed, err := claimRuns(tx, c.Worker, tx.now.Add(c.LeaseDuration), []int64{run.Sequence})
			if err != nil {
				return err
			}
			res.Claimed = claimed[0]
		}
		return shared.IdempotencyFinish(tx, p.Namespace, p.Idempotency, res)
	})
	if err != nil {
		return nil, fmt.Errorf("sending event: %w", err)
	}
	return res, nil
}

// consumeEvents deletes the events a checkpoint consumed; each must be in the
// run's inbox. Consume holds no duplicates (checked by CheckpointParams.Validate).
func consumeEvents(tx *wtx, runSeq int64, consume []int64) error {
	list, err := json.Marshal(consume)
	if err != nil {
		return err
	}
	res, err := tx.exec(sqlEventsConsume, runSeq, string(list))
	if err != nil {
		return fmt.Errorf("consuming events: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("consuming events: %w", err)
	}
	if int(n) != len(consume) {
		// The deletes already made are undone: the error leaves the request dirty,
		// so the batch is replayed with savepoints (see writer.applyFast).
		return fmt.Errorf("%w: Consume: %d of %d events are not in the run's inbox", store.ErrInvalidParams, len(consume)-int(n), len(consume))
	}
	return nil
}

// checkNoEvents fails with store.ErrConflict when the inbox of run
// (namespace, runID) holds an event named in names, other than those the
// checkpoint consumes. It runs before the checkpoint writes anything.
func checkNoEvents(tx *wtx, namespace, runID string, names []string, consume []int64) error {
	list, err := jsonList(names)
	if err != nil {
		return err
	}
	consumed, err := json.Marshal(append([]int64{}, consume...))
	if err != nil {
		return err
	}
	var found bool
	if err := tx.queryRow(sqlEventsAny, namespace, runID, list, string(consumed)).Scan(&found); err != nil {
		return fmt.Errorf("reading inbox: %w", err)
	}
	if found {
		return fmt.Errorf("%w: an event named in NoEvents is in the inbox", store.ErrConflict)
	}
	return nil
}

// loadInboxes fills the Inbox of claimed runs, keyed by sequence, in one query
// of the runs of seqs (a JSON list).
func loadInboxes(ctx context.Context, q querier, bySeq map[int64]*store.ClaimedRun, seqs string) error {
	rows, err := q.QueryContext(ctx, sqlInboxes, seqs)
	if err != nil {
		return fmt.Errorf("loading inboxes: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			ev     store.Event
			runSeq int64
			sent   sql.NullInt64
		)
		if err := rows.Scan(&ev.Seq, &runSeq, &ev.Name, &ev.Payload, &sent); err != nil {
			return fmt.Errorf("loading inboxes: %w", err)
		}
		cr := bySeq[runSeq]
		if cr == nil {
			continue
		}
		ev.Namespace, ev.RunID, ev.SentAt = cr.Run.Namespace, cr.Run.ID, fromNS(sent)
		cr.Inbox = append(cr.Inbox, &ev)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("loading inboxes: %w", err)
	}
	return nil
}
