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

// Checkpoint implements store.Store. The writer merges the checkpoints of a batch
// into one statement (see sqlCheckpoints).
func (s *Store) Checkpoint(ctx context.Context, p *store.CheckpointParams) (*store.CheckpointResult, error) {
	ck, err := newCkReq(s.now(), p)
	if err != nil {
		return nil, fmt.Errorf("checkpointing: %w", err)
	}
	l := p.Lease
	var topics []string
	if p.Status != store.StatusRunning {
		topics = append(topics, store.RunTopic(l.Namespace, l.RunID))
	}
	if p.Status == store.StatusPending || p.Status == store.StatusWaiting {
		topics = append(topics, store.TopicReady)
	}
	r := &request{ctx: ctx, ck: ck, topics: topics, done: make(chan error, 1)}
	if _, err := s.submit(ctx, r); err != nil {
		return nil, fmt.Errorf("checkpointing: %w", err)
	}
	if ck.res == nil {
		return nil, fmt.Errorf("checkpointing: %w: run %q token %d", store.ErrLeaseLost, l.RunID, l.Token)
	}
	return ck.res, nil
}

// A batch of one checkpoint uses a statement of its own shape rather than
// sqlCheckpoints, whose generic form costs the server about three times as much
// for a single run (w2 and w3 wait on that one checkpoint). A checkpoint is one
// statement: the run's state change, fenced by the lease token,
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

// checkpointStmt is the statement of a batch holding the single checkpoint ck.
func checkpointStmt(ck *ckReq) stmt {
	p, l := ck.p, ck.p.Lease
	set := ckSet[p.Status]
	var args argList
	where := `sequence = ` + seqOf(args.add(l.Namespace), args.add(l.RunID)) +
		` AND status = 'running' AND lease_token = ` + args.add(l.Token)
	set = strings.NewReplacer(
		"{now}", args.add(ck.now),
		"{wake}", placeholderIf(&args, strings.Contains(set, "{wake}"), timePtrArg(p.WakeAt)),
		"{reason}", placeholderIf(&args, strings.Contains(set, "{reason}"), ck.reason),
		"{err}", placeholderIf(&args, strings.Contains(set, "{err}"), ck.errText),
		"{status}", placeholderIf(&args, strings.Contains(set, "{status}"), string(p.Status)),
		"{output}", placeholderIf(&args, strings.Contains(set, "{output}"), p.Output),
	).Replace(set)
	var b strings.Builder
	b.WriteString("WITH f AS (UPDATE runs SET " + set + " WHERE " + where + " RETURNING sequence, cancel_requested)")
	for i, part := range ck.parts() {
		sql := part.sql
		for _, v := range part.arrays {
			sql = strings.Replace(sql, "{a}", args.add(v), 1)
		}
		fmt.Fprintf(&b, ", w%d AS (%s)", i, sql)
	}
	b.WriteString(" SELECT cancel_requested FROM f")
	return stmt{sql: b.String(), args: args, rows: func(rows pgx.Rows) error {
		ck.res = nil
		if !rows.Next() {
			return rows.Err()
		}
		var cancel bool
		if err := rows.Scan(&cancel); err != nil {
			return err
		}
		ck.res = &store.CheckpointResult{CancelRequested: cancel, At: ck.now.Truncate(time.Microsecond)}
		return nil
	}}
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

// parts returns the writes ck needs.
func (ck *ckReq) parts() []ckPart {
	var parts []ckPart
	if o := &ck.ops; len(o.pos) > 0 {
		parts = append(parts, ckPart{ckOps, []any{o.pos, o.kinds, o.names, o.done, o.results, o.errs, o.atts, o.started, o.finished}})
	}
	if a := &ck.atts; len(a.pos) > 0 {
		parts = append(parts, ckPart{ckAttempts, []any{a.pos, a.n, a.errs, a.started, a.finished}})
	}
	if kv := &ck.kv; len(kv.setKeys) > 0 {
		parts = append(parts, ckPart{ckKVSet, []any{kv.setKeys, kv.vals}})
	}
	if kv := &ck.kv; len(kv.delKeys) > 0 {
		parts = append(parts, ckPart{ckKVDelete, []any{kv.delKeys}})
	}
	return parts
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
