package storepg

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/trellis-dev/trellis/store"
)

// A checkpoint is one statement: the run's state change, fenced by the lease token,
// feeds every other write of the statement, so a stale token writes nothing (the
// statement returns no row) and the other requests of the batch are unaffected.
//
// Parameters: $1 namespace, $2 run ID, $3 token, $4 now; $5-$13 the ops as arrays,
// $14-$18 the attempts, $19-$20 keys set and their values, $21 keys deleted; then the
// status-specific values from $22.
const sqlCheckpointTail = `
), o AS (
	INSERT INTO ops (run_seq, position, kind, name, done, result, error, attempts, started_at, finished_at)
	SELECT f.sequence, x.* FROM f, unnest($5::int4[], $6::text[], $7::text[], $8::bool[], $9::bytea[],
		$10::text[], $11::int4[], $12::timestamptz[], $13::timestamptz[]) AS x
	ON CONFLICT (run_seq, position) DO UPDATE SET kind = excluded.kind, name = excluded.name,
		done = excluded.done, result = excluded.result, error = excluded.error,
		attempts = excluded.attempts, started_at = excluded.started_at, finished_at = excluded.finished_at
), a AS (
	INSERT INTO attempts (run_seq, position, attempt, error, started_at, finished_at)
	SELECT f.sequence, x.* FROM f, unnest($14::int4[], $15::int4[], $16::text[], $17::timestamptz[],
		$18::timestamptz[]) AS x
	ON CONFLICT DO NOTHING
), ks AS (
	INSERT INTO kv (run_seq, key, value)
	SELECT f.sequence, x.* FROM f, unnest($19::text[], $20::bytea[]) AS x
	ON CONFLICT (run_seq, key) DO UPDATE SET value = excluded.value
), kd AS (
	DELETE FROM kv USING f WHERE kv.run_seq = f.sequence AND kv.key = ANY($21::text[])
)
SELECT cancel_requested FROM f`

const ckFence = `WITH f AS (
	UPDATE runs SET `
const ckWhere = `, updated_at = $4
	WHERE namespace = $1 AND id = $2 AND status = 'running' AND lease_token = $3
	RETURNING sequence, cancel_requested`

// sqlCheckpoint is the statement of each target status.
var sqlCheckpoint = map[store.Status]string{
	store.StatusRunning: ckFence + `lease_owner = lease_owner` + ckWhere + sqlCheckpointTail,
	store.StatusWaiting: ckFence + `status = 'waiting', available_at = $22, wait_reason = $23,
	lease_owner = '', lease_expires_at = NULL` + ckWhere + sqlCheckpointTail,
	store.StatusBlocked: ckFence + `status = 'blocked', error = $22, wait_reason = $23,
	lease_owner = '', lease_expires_at = NULL` + ckWhere + sqlCheckpointTail,
	store.StatusPending: ckFence + `status = 'pending', available_at = $4, wait_reason = '',
	lease_owner = '', lease_expires_at = NULL` + ckWhere + sqlCheckpointTail,
	store.StatusSucceeded: ckFinished,
	store.StatusFailed:    ckFinished,
	store.StatusCancelled: ckFinished,
}

var ckFinished = ckFence + `status = $22, output = $23, error = $24, wait_reason = '',
	lease_owner = '', lease_expires_at = NULL, finished_at = $4` + ckWhere + sqlCheckpointTail

// Checkpoint implements store.Store.
func (s *Store) Checkpoint(ctx context.Context, p *store.CheckpointParams) (*store.CheckpointResult, error) {
	query, ok := sqlCheckpoint[p.Status]
	if !ok {
		return nil, fmt.Errorf("checkpointing: %w: Status: unknown status %q", store.ErrInvalidParams, p.Status)
	}
	args, err := checkpointArgs(s.now(), p)
	if err != nil {
		return nil, fmt.Errorf("checkpointing: %w", err)
	}
	var res *store.CheckpointResult
	l := p.Lease
	st := stmt{sql: query, args: args, rows: func(rows pgx.Rows) error {
		res = nil
		if !rows.Next() {
			return rows.Err()
		}
		var cancel bool
		if err := rows.Scan(&cancel); err != nil {
			return err
		}
		res = &store.CheckpointResult{CancelRequested: cancel}
		return nil
	}}
	var topics []string
	if p.Status != store.StatusRunning {
		topics = append(topics, store.RunTopic(l.Namespace, l.RunID))
	}
	if p.Status == store.StatusPending || p.Status == store.StatusWaiting {
		topics = append(topics, store.TopicReady)
	}
	if _, err := s.write(ctx, topics, st); err != nil {
		return nil, fmt.Errorf("checkpointing: %w", err)
	}
	if res == nil {
		return nil, fmt.Errorf("checkpointing: %w: run %q token %d", store.ErrLeaseLost, l.RunID, l.Token)
	}
	return res, nil
}

// checkpointArgs returns the statement's parameters. Writes to the same op, attempt
// or key are merged first (one statement may not touch a row twice): the last op
// and the last write of a key win, the first attempt wins, as when applied in order.
func checkpointArgs(now time.Time, p *store.CheckpointParams) ([]any, error) {
	args := []any{p.Lease.Namespace, p.Lease.RunID, p.Lease.Token, now}
	opArgs, err := opArrays(p.Ops)
	if err != nil {
		return nil, err
	}
	attArgs, err := attemptArrays(p.Attempts)
	if err != nil {
		return nil, err
	}
	args = append(append(append(args, opArgs...), attArgs...), kvArrays(p.KV)...)
	errText, err := errJSON(p.Error)
	if err != nil {
		return nil, err
	}
	switch p.Status {
	case store.StatusWaiting:
		args = append(args, timePtrArg(p.WakeAt), p.WaitReason)
	case store.StatusBlocked:
		reason := p.WaitReason
		if reason == "" && p.Error != nil {
			reason = p.Error.Message
		}
		args = append(args, errText, reason)
	case store.StatusSucceeded, store.StatusFailed, store.StatusCancelled:
		args = append(args, string(p.Status), p.Output, errText)
	}
	return args, nil
}

func opArrays(in []*store.Op) ([]any, error) {
	last := map[int]int{}
	for i, op := range in {
		last[op.Position] = i
	}
	var (
		pos, atts         []int32
		kinds, names      []string
		done              []bool
		results           [][]byte
		errs              []pgtype.Text
		started, finished []pgtype.Timestamptz
	)
	for i, op := range in {
		if last[op.Position] != i {
			continue
		}
		e, err := errJSON(op.Error)
		if err != nil {
			return nil, err
		}
		pos, atts = append(pos, int32(op.Position)), append(atts, int32(op.Attempts))
		kinds, names = append(kinds, string(op.Kind)), append(names, op.Name)
		done, results = append(done, op.Done), append(results, op.Result)
		errs = append(errs, textArg(e))
		started = append(started, tsArg(timeArg(op.StartedAt)))
		finished = append(finished, tsArg(timePtrArg(op.FinishedAt)))
	}
	return []any{pos, kinds, names, done, results, errs, atts, started, finished}, nil
}

func attemptArrays(in []store.Attempt) ([]any, error) {
	type key struct{ pos, n int }
	seen := map[key]bool{}
	var (
		pos, n            []int32
		errs              []string
		started, finished []pgtype.Timestamptz
	)
	for _, a := range in {
		if seen[key{a.Position, a.Attempt}] {
			continue
		}
		seen[key{a.Position, a.Attempt}] = true
		e, err := errJSON(&a.Error)
		if err != nil {
			return nil, err
		}
		pos, n, errs = append(pos, int32(a.Position)), append(n, int32(a.Attempt)), append(errs, *e)
		started = append(started, tsArg(timeArg(a.StartedAt)))
		finished = append(finished, tsArg(timeArg(a.FinishedAt)))
	}
	return []any{pos, n, errs, started, finished}, nil
}

// kvArrays returns the keys set with their values, and the keys deleted, after the
// writes are applied in order.
func kvArrays(in []store.KVWrite) []any {
	last := map[string]int{}
	for i, w := range in {
		last[w.Key] = i
	}
	setKeys, delKeys := []string{}, []string{}
	vals := [][]byte{}
	for i, w := range in {
		switch {
		case last[w.Key] != i:
		case w.Delete:
			delKeys = append(delKeys, w.Key)
		default:
			setKeys, vals = append(setKeys, w.Key), append(vals, nonNil(w.Value))
		}
	}
	return []any{setKeys, vals, delKeys}
}

func textArg(s *string) pgtype.Text {
	if s == nil {
		return pgtype.Text{}
	}
	return pgtype.Text{String: *s, Valid: true}
}

func tsArg(t *time.Time) pgtype.Timestamptz {
	if t == nil {
		return pgtype.Timestamptz{}
	}
	return pgtype.Timestamptz{Time: *t, Valid: true}
}
