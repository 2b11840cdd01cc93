package storepg

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-dev/trellis/store"
)

const (
	// sqlWakeIfInbox makes pending a run ($2) just checkpointed waiting when its
	// inbox already holds an event its wait_events name.
	sqlWakeIfInbox = `UPDATE runs r SET status = 'pending', available_at = $1, wait_reason = '',
	wait_events = NULL, updated_at = $1 WHERE r.sequence = $2 AND r.status = 'waiting'
	AND EXISTS (SELECT 1 FROM events e WHERE e.run_seq = $2 AND e.name = ANY(r.wait_events))`
	// sqlEventsConsume deletes consumed events ($2) of a run ($1).
	sqlEventsConsume = `DELETE FROM events WHERE run_seq = $1 AND seq = ANY($2::int8[])`
)

// inboxJSONCol is a scalar subquery returning the inbox of the run aliased r as a
// JSON array in Seq order, NULL when empty: one column of a claim. A run that was
// never sent an event (has_events, migration 0020) skips the query: an index
// probe per run, a sixth of a claim of jobs.
const inboxJSONCol = `CASE WHEN r.has_events THEN (SELECT json_agg(json_build_object('seq', e.seq, 'name', e.name,
	'payload', encode(e.payload, 'base64'), 'sent_at', e.sent_at) ORDER BY e.seq)
	FROM events e WHERE e.run_seq = r.sequence) END`

// sqlEventFlag marks the run sqlEventLock locked as sent an event (see
// inboxJSONCol), before sqlEventDeliver adds it: in the same transaction, and
// before sqlEventClaimed reads the inbox.
const sqlEventFlag = `UPDATE runs SET has_events = true WHERE sequence = ` + eventRunSeq + `
	AND NOT has_events AND status NOT IN ('succeeded', 'failed', 'cancelled')`

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

// EventSend goes through the writer as three statements of one request, so it is
// committed with the batch it joins in one round trip: sqlEventLock locks the run
// the Ref names and keeps its sequence in a transaction-local setting (the next
// statements cannot take the first one's result as a parameter, and must not find
// the run again: a workflow ID's latest run may change in between), sqlEventDeliver
// adds the event, wakes the run if it waits for that name (leasing it at once when
// Claim allows) and notifies, and sqlEventClaimed returns the leased run with its
// history and inbox. Each statement takes its own snapshot, after the lock, so the
// history and inbox are those of the run as the lock holder left it. Every request
// resets both settings first: the batch may hold other sends.
var (
	sqlEventLock = `WITH r AS MATERIALIZED (SELECT sequence, id, status FROM runs
		WHERE sequence = ` + refSeq + ` FOR NO KEY UPDATE)
	SELECT r.id, r.status, set_config('trellis.event_run', COALESCE(r.sequence::text, ''), true),
		set_config('trellis.event_claimed', '', true)
	FROM (SELECT 1) AS one LEFT JOIN r ON true`
	// sqlEventDeliver: $1 now, $2 name, $3 payload, $4 whether to claim, $5 worker,
	// $6 lease expiry, $7 lowest lease token, $8 workflows, $9 queues, $10 channel,
	// $11 the notification's prefix (runPrefix).
	sqlEventDeliver = `WITH r AS (SELECT sequence FROM runs WHERE sequence = ` + eventRunSeq + `
		AND status NOT IN ('succeeded', 'failed', 'cancelled')
	), e AS (
		INSERT INTO events (run_seq, name, payload, sent_at) SELECT sequence, $2, $3, $1 FROM r
		RETURNING seq, run_seq
	), w AS (
		UPDATE runs u SET status = CASE WHEN ` + eventClaimIf + ` THEN 'running' ELSE 'pending' END,
			available_at = $1, wait_reason = '', wait_events = NULL, updated_at = $1,
			lease_owner = CASE WHEN ` + eventClaimIf + ` THEN $5 ELSE u.lease_owner END,
			lease_token = CASE WHEN ` + eventClaimIf + ` THEN GREATEST(u.lease_token + 1, $7) ELSE u.lease_token END,
			lease_seq = CASE WHEN ` + eventClaimIf + ` THEN 0 ELSE u.lease_seq END,
			lease_fp = CASE WHEN ` + eventClaimIf + ` THEN 0 ELSE u.lease_fp END,
			lease_expires_at = CASE WHEN ` + eventClaimIf + ` THEN $6 ELSE u.lease_expires_at END,
			attempts = u.attempts + (` + eventClaimIf + `)::int,
			started_at = CASE WHEN ` + eventClaimIf + ` THEN COALESCE(u.started_at, $1) ELSE u.started_at END
		FROM e WHERE u.sequence = e.run_seq AND u.status = 'waiting' AND $2 = ANY(u.wait_events)
		RETURNING u.namespace, u.id, u.status = 'running' AS claimed
	)
	SELECT e.seq, w.id IS NOT NULL, COALESCE(w.claimed, false),
		CASE WHEN w.id IS NOT NULL THEN pg_notify($10, $11 || w.namespace || '/' || w.id) END,
		CASE WHEN w.claimed THEN set_config('trellis.event_claimed', 't', true) END
	FROM e LEFT JOIN w ON true`
	sqlEventClaimed = `SELECT ` + runColsR + `, ` + historyJSON("r.sequence") + `, ` + inboxJSONCol + `
	FROM runs r WHERE r.sequence = ` + eventRunSeq + ` AND current_setting('trellis.event_claimed', true) = 't'`
)

const (
	// eventRunSeq is the sequence sqlEventLock locked (NULL: none).
	eventRunSeq = `NULLIF(current_setting('trellis.event_run', true), '')::int8`
	// eventClaimIf says whether sqlEventDeliver leases the run u it wakes.
	eventClaimIf = `($4::bool AND u.workflow = ANY($8::text[])
		AND (cardinality($9::text[]) = 0 OR u.queue = ANY($9::text[]))
		AND (u.pin_version = 0 OR (u.workflow || '@' || u.pin_version::text) = ANY($12::text[])))`
)

// EventSend implements sqlstore.Own: store.Store's EventSend, under the payloads stored apart.
func (d seam) EventSend(ctx context.Context, p *store.EventSendParams) (*store.EventSendResult, error) {
	s := d.s
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("sending event: %w", err)
	}
	now := s.now().Truncate(time.Microsecond)
	var (
		id, status  *string
		seq         int64
		woken       bool
		claimed     []*store.ClaimedRun
		claim       = p.Claim != nil
		c           = p.Claim
		expires     time.Time
		worker      string
		wfs, queues = []string{}, []string{}
		pins        = []string{}
	)
	if claim {
		expires, worker, wfs, queues = now.Add(c.LeaseDuration), c.Worker, orEmpty(c.Workflows), orEmpty(c.Queues)
		pins = servedPins(&store.RunsClaimParams{Workflows: c.Workflows, Versions: c.Versions})
	}
	stmts := []stmt{
		{sql: sqlEventLock, args: []any{p.Namespace, p.Ref}, rows: func(rows pgx.Rows) error {
			id, status = nil, nil
			for rows.Next() {
				if err := rows.Scan(&id, &status, nil, nil); err != nil {
					return err
				}
			}
			return rows.Err()
		}},
		{sql: sqlEventFlag},
		{sql: sqlEventDeliver, args: []any{now, p.Name, p.Payload, claim, worker, expires, now.UnixMicro(),
			wfs, queues, s.channel, s.runPrefix(), pins}, rows: func(rows pgx.Rows) error {
			seq, woken = 0, false
			for rows.Next() {
				if err := rows.Scan(&seq, &woken, nil, nil, nil); err != nil {
					return err
				}
			}
			return rows.Err()
		}},
	}
	if claim {
		stmts = append(stmts, stmt{sql: sqlEventClaimed, rows: func(rows pgx.Rows) (err error) {
			claimed, err = scanClaimed(rows, expires)
			return err
		}})
	}
	// result is the call's result from what the statements read.
	result := func() (*store.EventSendResult, error) {
		switch {
		case id == nil:
			return nil, store.RunNotFound(p.Namespace, p.Ref)
		case store.Status(*status).Terminal():
			return nil, fmt.Errorf("%w: run %q is %s", store.ErrRunFinished, *id, *status)
		}
		ev := &store.Event{Seq: seq, Namespace: p.Namespace, RunID: *id, Name: p.Name,
			Payload: slices.Clone(p.Payload), SentAt: now}
		res := &store.EventSendResult{Event: ev}
		if len(claimed) == 1 {
			res.Claimed = claimed[0]
		}
		return res, nil
	}
	var (
		res *store.EventSendResult
		err error
	)
	if p.Idempotency == nil {
		if _, err = s.write(ctx, nil, stmts...); err == nil {
			res, err = result()
		}
	} else {
		err = s.writeGuarded(ctx, p.Namespace, p.Idempotency, nil, stmts, func() (r any, err error) {
			res, err = result()
			return res, err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("sending event: %w", err)
	}
	if woken {
		s.hub.Publish(store.RunTopic(p.Namespace, *id), store.TopicReady)
	}
	return res, nil
}
