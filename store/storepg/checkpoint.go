package storepg

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/trellis-dev/trellis/store"
)

// A checkpoint is one statement: the run's state change, fenced by the lease token,
// feeds every other write of the statement, so a stale token writes nothing (the
// statement returns no row) and the other requests of the batch are unaffected. The
// statement holds only the parts a checkpoint needs (a step's checkpoint is an UPDATE
// and one INSERT), so each shape is its own prepared statement.

// ckSet is the SET list of the run's update per target status; $N placeholders are
// numbered by checkpointQuery.
var ckSet = map[store.Status]string{
	store.StatusRunning: `updated_at = {now}`,
	store.StatusWaiting: `status = 'waiting', available_at = {wake}, wait_reason = {reason},
	lease_owner = '', lease_expires_at = NULL, updated_at = {now}`,
	store.StatusBlocked: `status = 'blocked', error = {err}, wait_reason = {reason},
	lease_owner = '', lease_expires_at = NULL, updated_at = {now}`,
	store.StatusPending: `status = 'pending', available_at = {now}, wait_reason = '',
	lease_owner = '', lease_expires_at = NULL, updated_at = {now}`,
	store.StatusSucceeded: ckFinished,
	store.StatusFailed:    ckFinished,
	store.StatusCancelled: ckFinished,
}

const ckFinished = `status = {status}, output = {output}, error = {err}, wait_reason = '',
	lease_owner = '', lease_expires_at = NULL, finished_at = {now}, updated_at = {now}`

const (
	ckOps = `INSERT INTO ops (run_seq, position, kind, name, done, result, error, attempts, started_at, finished_at)
	SELECT f.sequence, x.* FROM f, unnest({a}::int4[], {a}::text[], {a}::text[], {a}::bool[], {a}::bytea[],
		{a}::text[], {a}::int4[], {a}::timestamptz[], {a}::timestamptz[]) AS x
	ON CONFLICT (run_seq, position) DO UPDATE SET kind = excluded.kind, name = excluded.name,
		done = excluded.done, result = excluded.result, error = excluded.error,
		attempts = excluded.attempts, started_at = excluded.started_at, finished_at = excluded.finished_at`
	ckAttempts = `INSERT INTO attempts (run_seq, position, attempt, error, started_at, finished_at)
	SELECT f.sequence, x.* FROM f, unnest({a}::int4[], {a}::int4[], {a}::text[], {a}::timestamptz[],
		{a}::timestamptz[]) AS x
	ON CONFLICT DO NOTHING`
	ckKVSet = `INSERT INTO kv (run_seq, key, value)
	SELECT f.sequence, x.* FROM f, unnest({a}::text[], {a}::bytea[]) AS x
	ON CONFLICT (run_seq, key) DO UPDATE SET value = excluded.value`
	ckKVDelete = `DELETE FROM kv USING f WHERE kv.run_seq = f.sequence AND kv.key = ANY({a}::text[])`
)

// checkpointQuery builds the statement of p and its parameters.
func checkpointQuery(now time.Time, p *store.CheckpointParams) (string, []any, error) {
	set, ok := ckSet[p.Status]
	if !ok {
		return "", nil, fmt.Errorf("%w: Status: unknown status %q", store.ErrInvalidParams, p.Status)
	}
	errText, err := errJSON(p.Error)
	if err != nil {
		return "", nil, err
	}
	var args argList
	l := p.Lease
	where := `sequence = ` + seqOf(args.add(l.Namespace), args.add(l.RunID)) +
		` AND status = 'running' AND lease_token = ` + args.add(l.Token)
	nowArg := args.add(now)
	reason := p.WaitReason
	if p.Status == store.StatusBlocked && reason == "" && p.Error != nil {
		reason = p.Error.Message
	}
	set = strings.NewReplacer(
		"{now}", nowArg,
		"{wake}", placeholderIf(&args, strings.Contains(set, "{wake}"), timePtrArg(p.WakeAt)),
		"{reason}", placeholderIf(&args, strings.Contains(set, "{reason}"), reason),
		"{err}", placeholderIf(&args, strings.Contains(set, "{err}"), errText),
		"{status}", placeholderIf(&args, strings.Contains(set, "{status}"), string(p.Status)),
		"{output}", placeholderIf(&args, strings.Contains(set, "{output}"), p.Output),
	).Replace(set)
	var b strings.Builder
	b.WriteString("WITH f AS (UPDATE runs SET " + set + " WHERE " + where + " RETURNING sequence, cancel_requested)")
	parts, err := checkpointParts(p)
	if err != nil {
		return "", nil, err
	}
	for i, part := range parts {
		sql := part.sql
		for _, v := range part.arrays {
			sql = strings.Replace(sql, "{a}", args.add(v), 1)
		}
		fmt.Fprintf(&b, ", w%d AS (%s)", i, sql)
	}
	b.WriteString(" SELECT cancel_requested FROM f")
	return b.String(), args, nil
}

// placeholderIf adds v as a parameter when used, returning its placeholder.
func placeholderIf(args *argList, used bool, v any) string {
	if !used {
		return ""
	}
	return args.add(v)
}

// ckPart is one write of a checkpoint statement and its array parameters.
type ckPart struct {
	sql    string
	arrays []any
}

// checkpointParts returns the writes p needs. Writes to the same op, attempt or key
// are merged first (one statement may not touch a row twice): the last op and the
// last write of a key win, the first attempt wins, as when applied in order.
func checkpointParts(p *store.CheckpointParams) ([]ckPart, error) {
	var parts []ckPart
	if len(p.Ops) > 0 {
		a, err := opArrays(p.Ops)
		if err != nil {
			return nil, err
		}
		parts = append(parts, ckPart{ckOps, a})
	}
	if len(p.Attempts) > 0 {
		a, err := attemptArrays(p.Attempts)
		if err != nil {
			return nil, err
		}
		parts = append(parts, ckPart{ckAttempts, a})
	}
	if len(p.KV) > 0 {
		setKeys, vals, delKeys := kvArrays(p.KV)
		if len(setKeys) > 0 {
			parts = append(parts, ckPart{ckKVSet, []any{setKeys, vals}})
		}
		if len(delKeys) > 0 {
			parts = append(parts, ckPart{ckKVDelete, []any{delKeys}})
		}
	}
	return parts, nil
}

// Checkpoint implements store.Store.
func (s *Store) Checkpoint(ctx context.Context, p *store.CheckpointParams) (*store.CheckpointResult, error) {
	now := s.now()
	query, args, err := checkpointQuery(now, p)
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
		res = &store.CheckpointResult{CancelRequested: cancel, At: now.Truncate(time.Microsecond)}
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
func kvArrays(in []store.KVWrite) (setKeys []string, vals [][]byte, delKeys []string) {
	last := map[string]int{}
	for i, w := range in {
		last[w.Key] = i
	}
	for i, w := range in {
		switch {
		case last[w.Key] != i:
		case w.Delete:
			delKeys = append(delKeys, w.Key)
		default:
			setKeys, vals = append(setKeys, w.Key), append(vals, nonNil(w.Value))
		}
	}
	return setKeys, vals, delKeys
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
