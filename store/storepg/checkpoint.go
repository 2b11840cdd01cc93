package storepg

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// Checkpoint implements store.Store: its big payloads are moved apart first. The writer merges the checkpoints of a batch
// into one statement (see sqlCheckpoints). A blocking checkpoint takes the waiting
// path: when the run's cancellation was requested it ends the run cancelled.
func (s *Store) Checkpoint(ctx context.Context, p *store.CheckpointParams) (*store.CheckpointResult, error) {
	p, err := sqlstore.CheckpointPayloads(&s.methods, ctx, p)
	if err != nil {
		return nil, err
	}
	res, err := s.checkpoint(ctx, p)
	if err != nil && p.Seq > 0 && errors.Is(err, store.ErrLeaseLost) {
		return s.checkpointLost(ctx, p, err)
	}
	return res, err
}

// checkpointLost answers a guarded checkpoint that found its lease lost (err):
// perhaps it is a retry of a checkpoint that was applied (see
// store.CheckpointParams.Seq). It and the error paths below are functions of
// their own so that Checkpoint's and checkpoint's frames stay small: every
// run's workflow goroutine makes its checkpoints through them, and larger ones
// made each grow its stack from 4 to 8 KiB, copying it, in every checkpoint.
//
//go:noinline
func (s *Store) checkpointLost(ctx context.Context, p *store.CheckpointParams, err error) (*store.CheckpointResult, error) {
	r, rerr := s.leaseReplay(ctx, p.Lease, p.Seq, p.Fingerprint)
	switch {
	case rerr == nil:
		return r, nil
	case !errors.Is(rerr, store.ErrLeaseLost):
		return nil, fmt.Errorf("checkpointing: %w", rerr)
	}
	return nil, err
}

// ckError is a checkpoint's error err.
//
//go:noinline
func ckError(err error) error { return fmt.Errorf("checkpointing: %w", err) }

// ckLeaseLost is the error of a checkpoint of p whose lease is not current.
//
//go:noinline
func ckLeaseLost(p *store.CheckpointParams) error {
	return fmt.Errorf("checkpointing: %w: run %q token %d", store.ErrLeaseLost, p.Lease.RunID, p.Lease.Token)
}

func (s *Store) checkpoint(ctx context.Context, p *store.CheckpointParams) (*store.CheckpointResult, error) {
	ck, err := newCkReq(s.now(), p)
	if err != nil {
		return nil, ckError(err)
	}
	if usesWaiting(p) || p.Status == store.StatusBlocked || p.Status == store.StatusFailed {
		// A failure may become a workflow retry (see wfretry.go).
		return s.checkpointWaiting(ctx, ck) // see ckwait.go
	}
	r := &request{ctx: ctx, ck: ck, topics: checkpointTopics(p), done: make(chan error, 1)}
	if _, err := s.submit(ctx, r); err != nil {
		return nil, ckError(err)
	}
	if ck.res == nil && p.Status.Terminal() {
		// A stale lease, or a child's final checkpoint: its group counts it.
		return s.checkpointChildEnd(ctx, ck) // see childend.go
	}
	if ck.res == nil {
		return nil, ckLeaseLost(p)
	}
	return ck.res, nil
}

// checkpointTopics are the topics a checkpoint publishes.
func checkpointTopics(p *store.CheckpointParams) []string {
	var topics []string
	if p.Status != store.StatusRunning {
		topics = append(topics, store.RunTopic(p.Lease.Namespace, p.Lease.RunID))
	}
	if p.Status == store.StatusPending || p.Status == store.StatusWaiting {
		topics = append(topics, store.TopicReady)
	}
	if len(p.Stream) > 0 {
		topics = append(topics, store.StreamTopic(p.Lease.Namespace, p.Lease.RunID))
	}
	return topics
}

// A batch of one checkpoint uses a statement of its own shape rather than
// sqlCheckpoints, whose generic form costs the server about three times as much
// for a single run (w2 and w3 wait on that one checkpoint). The run's state change,
// fenced by the lease token, feeds every other write of the statement, so a stale
// token writes nothing (the statement returns no row). The statement holds only the
// parts the checkpoint needs (a step's checkpoint is an UPDATE and one INSERT of
// scalars), so each shape is its own prepared statement; its text is built once.

// ckSet is the SET list of the run's update per target status, with the
// parameters it uses (each {name} is replaced by the next placeholder).
var ckSet = map[store.Status]struct {
	set    string
	params []string
}{
	store.StatusRunning: {`updated_at = {now}`, nil},
	// A run whose cancellation was requested is handed back instead of waiting
	// (pending, due now): waiting, it would keep the cancellation until the wait
	// ended on its own.
	store.StatusWaiting: {`status = CASE WHEN cancel_requested THEN 'pending' ELSE 'waiting' END,
	available_at = CASE WHEN cancel_requested THEN {now}::timestamptz ELSE {wake}::timestamptz END,
	wait_reason = CASE WHEN cancel_requested THEN '' ELSE {reason}::text END,
	lease_owner = '', lease_expires_at = NULL, updated_at = {now}`, []string{"wake", "reason"}},
	store.StatusBlocked: {`status = 'blocked', error = {err}, wait_reason = {reason},
	lease_owner = '', lease_expires_at = NULL, updated_at = {now}`, []string{"err", "reason"}},
	store.StatusPending: {`status = 'pending', available_at = {now}, wait_reason = '',
	lease_owner = '', lease_expires_at = NULL, updated_at = {now}`, nil},
	store.StatusSucceeded: {ckFinished, ckFinishedParams},
	store.StatusFailed:    {ckFinished, ckFinishedParams},
	store.StatusCancelled: {ckFinished, ckFinishedParams},
}

const ckFinished = `status = {status}, output = {output}, error = {err}, wait_reason = '',
	lease_owner = '', lease_expires_at = NULL, finished_at = {now}, updated_at = {now}`

var ckFinishedParams = []string{"status", "output", "err"}

// The writes of a checkpoint statement besides the run's update; each {a} is the
// next placeholder.
const (
	ckOp = `INSERT INTO ops (run_seq, position, kind, name, done, result, error, attempts, started_at, finished_at)
	SELECT f.sequence, {a}::int4, {a}::text, {a}::text, {a}::bool, {a}::bytea, {a}::text, {a}::int4,
		{a}::timestamptz, {a}::timestamptz FROM f
	ON CONFLICT (run_seq, position) DO UPDATE SET kind = excluded.kind, name = excluded.name,
		done = excluded.done, result = excluded.result, error = excluded.error,
		attempts = excluded.attempts, started_at = excluded.started_at, finished_at = excluded.finished_at`
	ckOps = `INSERT INTO ops (run_seq, position, kind, name, done, result, error, attempts, started_at, finished_at)
	SELECT f.sequence, x.* FROM f, unnest({a}::int4[], {a}::text[], {a}::text[], {a}::bool[], {a}::bytea[],
		{a}::text[], {a}::int4[], {a}::timestamptz[], {a}::timestamptz[]) AS x
	ON CONFLICT (run_seq, position) DO UPDATE SET kind = excluded.kind, name = excluded.name,
		done = excluded.done, result = excluded.result, error = excluded.error,
		attempts = excluded.attempts, started_at = excluded.started_at, finished_at = excluded.finished_at`
	ckAttempts = `INSERT INTO attempts (run_seq, position, attempt, error, started_at, finished_at, outcome)
	SELECT f.sequence, x.* FROM f, unnest({a}::int4[], {a}::int4[], {a}::text[], {a}::timestamptz[],
		{a}::timestamptz[], {a}::text[]) AS x
	ON CONFLICT (run_seq, position, attempt) DO UPDATE SET error = excluded.error,
		started_at = excluded.started_at, finished_at = excluded.finished_at, outcome = excluded.outcome`
	ckKVSet = `INSERT INTO kv (run_seq, key, value)
	SELECT f.sequence, x.* FROM f, unnest({a}::text[], {a}::bytea[]) AS x
	ON CONFLICT (run_seq, key) DO UPDATE SET value = excluded.value`
	ckKVDelete = `DELETE FROM kv USING f WHERE kv.run_seq = f.sequence AND kv.key = ANY({a}::text[])`
	// ckStream appends the stream events ({a} names, {a} data) with the
	// sequences the update took, the last {n} of the run's (the update's
	// parameter: no count over the events to plan); $4 is now.
	ckStream = `INSERT INTO stream_events (run_seq, seq, name, data, created_at)
	SELECT f.sequence, f.stream_seq - {n}::int8 + x.ord, x.name, x.data, $4
	FROM f, unnest({a}::text[], {a}::bytea[]) WITH ORDINALITY AS x(name, data, ord)`
)

// ckShape identifies a checkpoint statement's text.
type ckShape struct {
	status store.Status
	parts  string // the writes, in order: o (one op), O (ops), A, S, D, E (stream)
	stream bool   // the update takes stream sequences (E)
	// bySeq: the run is found by the lease's sequence hint (store.Lease.RunSeq,
	// the last parameter), not looked up by namespace and ID.
	bySeq bool
}

// planOnce says whether the shape's statement may run on a generic plan
// (stmt.generic): with the sequence hint, a checkpoint that writes ops and
// stream events reads runs through runs_pkey alone, whatever the table holds
// (TestGenericPlans); kv and attempts are left to custom plans.
func (shape ckShape) planOnce() bool {
	return shape.bySeq && strings.Trim(shape.parts, "oOE") == ""
}

var ckSQL sync.Map // ckShape -> string

// checkpointStmt is the statement of a batch holding the single checkpoint ck.
func checkpointStmt(ck *ckReq) stmt {
	p, l := ck.p, ck.p.Lease
	args := []any{l.Namespace, l.RunID, l.Token, ck.now, p.Seq, p.Fingerprint}
	for _, name := range ckSet[p.Status].params {
		switch name {
		case "wake":
			args = append(args, timePtrArg(p.WakeAt))
		case "reason":
			args = append(args, ck.reason)
		case "err":
			args = append(args, ck.errText)
		case "status":
			args = append(args, string(p.Status))
		case "output":
			args = append(args, p.Output)
		}
	}
	shape := ckShape{status: p.Status}
	var names []string
	var datas [][]byte
	if len(p.Stream) > 0 {
		// The run's update takes the stream's next sequences (stream_seq); the
		// events are numbered from its result.
		shape.stream = true
		for _, w := range p.Stream {
			names, datas = append(names, w.Name), append(datas, w.Data)
		}
		args = append(args, len(p.Stream))
	}
	if o := &ck.ops; len(o.pos) == 1 {
		shape.parts += "o"
		args = append(args, o.pos[0], o.kinds[0], o.names[0], o.done[0], o.results[0], o.errs[0], o.atts[0], o.started[0], o.finished[0])
	} else if len(o.pos) > 1 {
		shape.parts += "O"
		args = append(args, o.pos, o.kinds, o.names, o.done, o.results, o.errs, o.atts, o.started, o.finished)
	}
	if a := &ck.atts; len(a.pos) > 0 {
		shape.parts += "A"
		args = append(args, a.pos, a.n, a.errs, a.started, a.finished, a.outcomes)
	}
	if kv := &ck.kv; len(kv.setKeys) > 0 {
		shape.parts += "S"
		args = append(args, kv.setKeys, kv.vals)
	}
	if kv := &ck.kv; len(kv.delKeys) > 0 {
		shape.parts += "D"
		args = append(args, kv.delKeys)
	}
	if shape.stream {
		shape.parts += "E"
		args = append(args, names, datas)
	}
	if l.RunSeq > 0 {
		shape.bySeq = true
		args = append(args, l.RunSeq)
	}
	sql, ok := ckSQL.Load(shape)
	if !ok {
		sql, _ = ckSQL.LoadOrStore(shape, buildCheckpointSQL(shape))
	}
	return stmt{sql: sql.(string), args: args, generic: shape.planOnce(), rows: func(rows pgx.Rows) error {
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

// buildCheckpointSQL writes the statement of a shape; its placeholders follow the
// order in which checkpointStmt adds the arguments.
func buildCheckpointSQL(shape ckShape) string {
	n := 0
	next := func() string { n++; return fmt.Sprintf("$%d", n) }
	// By the sequence hint, the namespace and ID are checked in a row comparison
	// that no index matches (as in sqlCheckpoints): the plan reads runs_pkey.
	run, running := seqOf(next(), next()), `status = 'running'`
	if shape.bySeq {
		// The status is compared as an expression, from which runs_running's
		// condition does not follow: a plan made on a table that never held
		// a row could otherwise read that partial index (every running run)
		// instead of runs_pkey, and a generic plan (stmt.generic) keeps it.
		run = `{rseq} AND (namespace, id) IS NOT DISTINCT FROM ($1::text, $2::text)`
		running = `status || '' = 'running'`
	}
	where := `sequence = ` + run + ` AND ` + running + ` AND lease_token = ` + next()
	if shape.status.Terminal() {
		where += ` AND parent_seq IS NULL` // a child ends through the ender
	}
	cs := ckSet[shape.status]
	set := strings.ReplaceAll(cs.set, "{now}", next())
	guardSet, guardWhere := ckGuard(next(), next())
	set += ", " + guardSet
	where += guardWhere
	for _, name := range cs.params {
		set = strings.ReplaceAll(set, "{"+name+"}", next())
	}
	events := "" // the parameter of the number of stream events
	if shape.stream {
		events = next()
		set += ", stream_seq = stream_seq + " + events + "::int8"
	}
	var b strings.Builder
	b.WriteString("WITH f AS (UPDATE runs SET " + set + " WHERE " + where + " RETURNING sequence, cancel_requested, stream_seq)")
	for i, part := range shape.parts {
		sql := map[rune]string{'o': ckOp, 'O': ckOps, 'A': ckAttempts, 'S': ckKVSet, 'D': ckKVDelete, 'E': ckStream}[part]
		sql = strings.Replace(sql, "{n}", events, 1)
		for strings.Contains(sql, "{a}") {
			sql = strings.Replace(sql, "{a}", next(), 1)
		}
		fmt.Fprintf(&b, ", w%d AS (%s)", i, sql)
	}
	b.WriteString(" SELECT cancel_requested FROM f")
	if shape.bySeq {
		return strings.Replace(b.String(), "{rseq}", next()+"::int8", 1)
	}
	return b.String()
}

// ckGuard returns the SET and the fence of a guarded lease write
// (store.CheckpointParams.Seq) whose Seq and fingerprint are the parameters seq
// and fp: it applies only when its lease has not applied it yet (Seq 0: always),
// and keeps its key in the row.
func ckGuard(seq, fp string) (set, where string) {
	set = `lease_seq = CASE WHEN ` + seq + `::int8 = 0 THEN lease_seq ELSE ` + seq + `::int8 END,
	lease_fp = CASE WHEN ` + seq + `::int8 = 0 THEN lease_fp ELSE ` + fp + `::int8 END`
	return set, ` AND (` + seq + `::int8 = 0 OR lease_seq < ` + seq + `::int8)`
}

// sqlLeaseReplay reads what tells a retry of a guarded lease write that was
// applied from a stale lease.
var sqlLeaseReplay = `SELECT lease_token, lease_seq, lease_fp, cancel_requested, updated_at FROM runs
	WHERE namespace = $1 AND id = $2`

// leaseReplay answers a guarded lease write of lease l (sequence seq,
// fingerprint fp) that failed with store.ErrLeaseLost: a retry of a write the
// lease applied already gets the answer of an applied one (or
// store.ErrIdempotencyKeyConflict). The run's lease token and sequence only move
// forward, so a read after the failed write tells.
func (s *Store) leaseReplay(ctx context.Context, l store.Lease, seq, fp int64) (*store.CheckpointResult, error) {
	var (
		token, last, lastFP int64
		cancel              bool
		updated             time.Time
	)
	err := s.read(ctx, func() error {
		return s.pool.QueryRow(ctx, sqlLeaseReplay, l.Namespace, l.RunID).Scan(&token, &last, &lastFP, &cancel, &updated)
	})
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: run %q token %d", store.ErrLeaseLost, l.RunID, l.Token)
	}
	if err != nil {
		return nil, s.readErr(err)
	}
	res, err := sqlstore.LeaseReplay(l, seq, fp, token, last, lastFP)
	if err != nil {
		return nil, err
	}
	res.CancelRequested, res.At = cancel, updated.UTC()
	return res, nil
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
