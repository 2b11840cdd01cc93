package storepg

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-dev/trellis/store"
)

const (
	sqlEventInsert = `INSERT INTO events (run_seq, name, payload, sent_at) VALUES ($1, $2, $3, $4) RETURNING seq`
	// sqlWakeOnEvent makes pending a run ($2) waiting for an event named $3.
	sqlWakeOnEvent = `UPDATE runs SET status = 'pending', available_at = $1, wait_reason = '',
	wait_events = NULL, updated_at = $1 WHERE sequence = $2 AND status = 'waiting' AND $3 = ANY(wait_events)
	RETURNING namespace, id`
	// sqlWakeIfInbox makes pending a run ($2) just checkpointed waiting when its
	// inbox already holds an event its wait_events name.
	sqlWakeIfInbox = `UPDATE runs r SET status = 'pending', available_at = $1, wait_reason = '',
	wait_events = NULL, updated_at = $1 WHERE r.sequence = $2 AND r.status = 'waiting'
	AND EXISTS (SELECT 1 FROM events e WHERE e.run_seq = $2 AND e.name = ANY(r.wait_events))`
	// sqlEventsConsume deletes consumed events ($2) of a run ($1).
	sqlEventsConsume = `DELETE FROM events WHERE run_seq = $1 AND seq = ANY($2::int8[])`
	// sqlRunStatusLock locks a run's row and returns its status.
	sqlRunStatusLock = `SELECT status FROM runs WHERE sequence = $1 FOR NO KEY UPDATE`
)

// sqlClaimOne leases one pending run ($1) as sqlClaim does, with its history and
// inbox.
var sqlClaimOne = `UPDATE runs r SET status = 'running', lease_owner = $2,
	lease_token = GREATEST(r.lease_token + 1, $4), lease_expires_at = $3, attempts = r.attempts + 1,
	started_at = COALESCE(r.started_at, $5), wait_reason = '', wait_events = NULL, updated_at = $5
	WHERE r.sequence = $1 AND r.status = 'pending'
	RETURNING ` + runColsR + `, ` + historyJSON("r.sequence") + `, ` + inboxJSONCol

// inboxJSONCol is a scalar subquery returning the inbox of the run aliased r as a
// JSON array in Seq order, NULL when empty: one column of a claim, an index probe
// for a run without events.
const inboxJSONCol = `(SELECT json_agg(json_build_object('seq', e.seq, 'name', e.name,
	'payload', encode(e.payload, 'base64'), 'sent_at', e.sent_at) ORDER BY e.seq)
	FROM events e WHERE e.run_seq = r.sequence)`

// decodeInbox decodes the JSON of inboxJSONCol into the events of run.
func decodeInbox(b []byte, run *store.Run) ([]*store.Event, error) {
	evs := []*store.Event{}
	if len(b) == 0 {
		return evs, nil
	}
	if err := json.Unmarshal(b, &evs); err != nil {
		return nil, fmt.Errorf("decoding inbox: %w", err)
	}
	for _, ev := range evs {
		ev.Namespace, ev.RunID, ev.SentAt = run.Namespace, run.ID, ev.SentAt.UTC()
	}
	return evs, nil
}

// EventSend implements store.Store.
func (s *Store) EventSend(ctx context.Context, p *store.EventSendParams) (*store.EventSendResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("sending event: %w", err)
	}
	var res *store.EventSendResult
	err := s.inTx(ctx, func(tx *wtx) (err error) {
		res, err = eventSend(tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sending event: %w", err)
	}
	return res, nil
}

func eventSend(tx *wtx, p *store.EventSendParams) (*store.EventSendResult, error) {
	run, err := lockRun(tx, p.Namespace, p.Ref)
	if err != nil {
		return nil, err
	}
	if run.Status.Terminal() {
		return nil, fmt.Errorf("%w: run %q is %s", store.ErrRunFinished, run.ID, run.Status)
	}
	ev := &store.Event{Namespace: run.Namespace, RunID: run.ID, Name: p.Name, Payload: slices.Clone(p.Payload), SentAt: tx.now}
	var woken bool
	if ev.Seq, woken, err = deliver(tx, run.Sequence, p.Name, p.Payload); err != nil {
		return nil, err
	}
	res := &store.EventSendResult{Event: ev}
	if c := p.Claim; woken && c != nil && slices.Contains(c.Workflows, run.Workflow) &&
		(len(c.Queues) == 0 || slices.Contains(c.Queues, run.Queue)) {
		if res.Claimed, err = claimOne(tx, run.Sequence, c); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// deliver adds an event to the inbox of run runSeq, whose row the caller has
// locked, and wakes the run if it waits for that name. It returns the event's Seq
// and whether the run was woken.
func deliver(tx *wtx, runSeq int64, name string, payload []byte) (int64, bool, error) {
	var seq int64
	if err := tx.queryRow(sqlEventInsert, runSeq, name, payload, tx.now).Scan(&seq); err != nil {
		return 0, false, fmt.Errorf("adding event: %w", err)
	}
	var namespace, id string
	err := tx.queryRow(sqlWakeOnEvent, tx.now, runSeq, name).Scan(&namespace, &id)
	switch {
	case errors.Is(err, pgx.ErrNoRows): // not waiting for it
		return seq, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("waking run: %w", err)
	}
	tx.publish(store.RunTopic(namespace, id), store.TopicReady)
	return seq, true, nil
}

// deliverIfActive is deliver for the store's own events to a run whose row is not
// locked yet: it locks it, and adds nothing to the inbox of a finished run.
func deliverIfActive(tx *wtx, runSeq int64, name string, payload []byte) error {
	var status string
	if err := tx.queryRow(sqlRunStatusLock, runSeq).Scan(&status); err != nil {
		return fmt.Errorf("locking run: %w", err)
	}
	if store.Status(status).Terminal() {
		return nil
	}
	_, _, err := deliver(tx, runSeq, name, payload)
	return err
}

// claimOne leases the pending run runSeq to c.Worker and returns it with its
// history and inbox.
func claimOne(tx *wtx, runSeq int64, c *store.EventClaim) (*store.ClaimedRun, error) {
	expires := tx.now.Add(c.LeaseDuration)
	rows, err := tx.query(sqlClaimOne, runSeq, c.Worker, expires, tx.now.UnixMicro(), tx.now)
	if err != nil {
		return nil, fmt.Errorf("leasing run: %w", err)
	}
	claimed, err := scanClaimed(rows, expires)
	rows.Close()
	if err != nil {
		return nil, fmt.Errorf("leasing run: %w", err)
	}
	if len(claimed) != 1 {
		return nil, fmt.Errorf("leasing run: run %d vanished", runSeq)
	}
	return claimed[0], nil
}
