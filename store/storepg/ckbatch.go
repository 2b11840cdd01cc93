package storepg

import (
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/trellis-dev/trellis/store"
)

// The checkpoints of a batch are one statement: every run's fenced update, then
// the ops, attempts and run-store writes of the runs whose update matched. A
// checkpoint whose lease is stale matches no row, so it writes nothing and the
// others commit: fencing stays per checkpoint. One statement instead of one per
// checkpoint is what makes group commit cheap on the server (w1 sends ~100
// checkpoints per batch).
//
// Each row of ops, attempts, run-store writes and stream events carries the
// ordinal i of its checkpoint and is joined to the updated runs by it. (They
// used to be picked from the arrays by index, ($18::int4[])[g]: Postgres finds
// the g-th element of an array of variable-length values by walking from the
// first, so a batch of n rows cost n²/2 steps per array.)
//
// The run is found by its unique (namespace, id) and updated by sequence; see
// seqOf for why not by "namespace AND id AND status = 'running'". A lease that
// carries the run's sequence (store.Lease.RunSeq, from the claim) skips the
// lookup: a fifth of the buffers an end of a job read, about a tenth of its time
// (w5, 27 Nov). The update then checks the run's namespace and ID, in a row
// comparison no index matches: with "r.namespace = c.ns AND r.id = c.id" the
// planner walked runs_running (every running run of the namespace) for each
// checkpoint, 180 µs per job instead of 27. A guarded
// checkpoint (store.CheckpointParams.Seq) also matches only if its lease has not
// applied it yet, and keeps its key in the row. A run whose
// cancellation was requested is handed back (pending, due now) instead of waiting.
// The runs are locked in sequence order first (lockInOrder), but for children whose
// final checkpoint the statement leaves to the ender (sqlCkLockSkipsChildEnds).
//
// sqlCkHead is the statement's head: it finds, locks and updates the runs; the
// writes of what the updated runs' checkpoints hold follow (ckCTEs).
var sqlCkHead = `WITH c AS MATERIALIZED (
	SELECT c.*, CASE WHEN c.rseq > 0 THEN c.rseq
		ELSE (SELECT k.sequence FROM runs k WHERE k.namespace = c.ns AND k.id = c.id) END AS seq
	FROM unnest($1::text[], $2::text[], $3::int8[], $4::text[], $5::timestamptz[],
		$6::timestamptz[], $7::text[], $8::text[], $9::bytea[], $10::int4[], $36::int8[], $37::int8[], $38::int8[])
	WITH ORDINALITY AS c(ns, id, token, status, now, wake, reason, err, output, ev_n, ck_seq, ck_fp, rseq, i)
), lk AS MATERIALIZED (` + lockInOrder(`SELECT seq FROM c`, sqlCkLockSkipsChildEnds, ``) + `
), f AS (
	UPDATE runs r SET status = CASE WHEN c.status = 'waiting' AND r.cancel_requested THEN 'pending' ELSE c.status END,
		output = CASE WHEN c.status IN ('succeeded', 'failed', 'cancelled') THEN c.output ELSE r.output END,
		error = CASE WHEN c.status IN ('succeeded', 'failed', 'cancelled', 'blocked') THEN c.err ELSE r.error END,
		available_at = CASE c.status WHEN 'waiting' THEN (CASE WHEN r.cancel_requested THEN c.now ELSE c.wake END)
			WHEN 'pending' THEN c.now ELSE r.available_at END,
		wait_reason = CASE c.status WHEN 'running' THEN r.wait_reason
			WHEN 'waiting' THEN (CASE WHEN r.cancel_requested THEN '' ELSE c.reason END)
			WHEN 'blocked' THEN c.reason ELSE '' END,
		lease_owner = CASE c.status WHEN 'running' THEN r.lease_owner ELSE '' END,
		lease_expires_at = CASE c.status WHEN 'running' THEN r.lease_expires_at END,
		finished_at = CASE WHEN c.status IN ('succeeded', 'failed', 'cancelled') THEN c.now ELSE r.finished_at END,
		updated_at = c.now, stream_seq = r.stream_seq + c.ev_n,
		lease_seq = CASE WHEN c.ck_seq = 0 THEN r.lease_seq ELSE c.ck_seq END,
		lease_fp = CASE WHEN c.ck_seq = 0 THEN r.lease_fp ELSE c.ck_fp END
	FROM c JOIN lk ON lk.sequence = c.seq
	WHERE r.sequence = c.seq AND (r.namespace, r.id) IS NOT DISTINCT FROM (c.ns, c.id) AND r.status = 'running' AND r.lease_token = c.token
		AND (c.ck_seq = 0 OR r.lease_seq < c.ck_seq)
		AND (r.parent_seq IS NULL OR c.status NOT IN ('succeeded', 'failed', 'cancelled'))
	RETURNING c.i, r.sequence, r.cancel_requested, c.ev_n, c.now, r.stream_seq
`

// sqlCkLockSkipsChildEnds keeps the lock of a batch of checkpoints (lk) off the
// children whose final checkpoint it does not apply (the guard of f below; the
// ender ends them, see childend.go, and its statement drops this condition). Locking
// such a child for nothing, a batch could hold it while the transaction that ends
// its group, holding a sibling the batch waited for, wanted it.
const sqlCkLockSkipsChildEnds = `AND (parent_seq IS NULL OR sequence IN (SELECT seq FROM c
		WHERE c.status NOT IN ('succeeded', 'failed', 'cancelled'))) `

// ckCTEs are the writes of sqlCheckpoints after the runs' update, each with its
// parameters; a batch that has none of a kind (most have no attempts and no
// run-store writes) gets a stub that only gives those parameters their types,
// which Postgres neither plans nor runs. Planning the whole statement took about
// 1.2 ms of the database's CPU per batch.
var ckCTEs = []struct{ name, body, stub string }{
	{"e", `	INSERT INTO stream_events (run_seq, seq, name, data, created_at)
	SELECT f.sequence, f.stream_seq - f.ev_n + x.k, x.name, x.data, f.now
	FROM unnest($32::int4[], $33::int4[], $34::text[], $35::bytea[]) AS x(i, k, name, data)
	JOIN f ON f.i = x.i`,
		`SELECT $32::int4[], $33::int4[], $34::text[], $35::bytea[]`},
	{"o", `	INSERT INTO ops (run_seq, position, kind, name, done, result, error, attempts, started_at, finished_at)
	SELECT f.sequence, x.position, x.kind, x.name, x.done, x.result, x.error, x.attempts, x.started_at, x.finished_at
	FROM unnest($11::int4[], $12::int4[], $13::text[], $14::text[], $15::bool[], $16::bytea[], $17::text[],
		$18::int4[], $19::timestamptz[], $20::timestamptz[])
		AS x(i, position, kind, name, done, result, error, attempts, started_at, finished_at)
	JOIN f ON f.i = x.i
	ON CONFLICT (run_seq, position) DO UPDATE SET kind = excluded.kind, name = excluded.name,
		done = excluded.done, result = excluded.result, error = excluded.error,
		attempts = excluded.attempts, started_at = excluded.started_at, finished_at = excluded.finished_at`,
		`SELECT $11::int4[], $12::int4[], $13::text[], $14::text[], $15::bool[], $16::bytea[], $17::text[],
		$18::int4[], $19::timestamptz[], $20::timestamptz[]`},
	{"a", `	INSERT INTO attempts (run_seq, position, attempt, error, started_at, finished_at, outcome)
	SELECT f.sequence, x.position, x.attempt, x.error, x.started_at, x.finished_at, x.outcome
	FROM unnest($21::int4[], $22::int4[], $23::int4[], $24::text[], $25::timestamptz[], $26::timestamptz[], $39::text[])
		AS x(i, position, attempt, error, started_at, finished_at, outcome)
	JOIN f ON f.i = x.i
	ON CONFLICT (run_seq, position, attempt) DO UPDATE SET error = excluded.error,
		started_at = excluded.started_at, finished_at = excluded.finished_at, outcome = excluded.outcome`,
		`SELECT $21::int4[], $22::int4[], $23::int4[], $24::text[], $25::timestamptz[], $26::timestamptz[], $39::text[]`},
	{"s", `	INSERT INTO kv (run_seq, key, value)
	SELECT f.sequence, x.key, x.value
	FROM unnest($27::int4[], $28::text[], $29::bytea[]) AS x(i, key, value) JOIN f ON f.i = x.i
	ON CONFLICT (run_seq, key) DO UPDATE SET value = excluded.value`,
		`SELECT $27::int4[], $28::text[], $29::bytea[]`},
	{"d", `	DELETE FROM kv USING f, unnest($30::int4[], $31::text[]) AS x(i, key)
	WHERE f.i = x.i AND kv.run_seq = f.sequence AND kv.key = x.key`,
		`SELECT $30::int4[], $31::text[]`},
}

// sqlCheckpointsFor is sqlCheckpoints with the writes of ckCTEs whose bit is set
// in mask (bit i for ckCTEs[i]), the others stubbed.
var sqlCheckpointsFor = func() (v [1 << 5]string) {
	for mask := range v {
		var b strings.Builder
		b.WriteString(sqlCkHead)
		for i, c := range ckCTEs {
			body := c.stub
			if mask&(1<<i) != 0 {
				body = c.body
			}
			b.WriteString("), " + c.name + " AS (\n" + body + "\n")
		}
		b.WriteString(")\nSELECT i, cancel_requested FROM f")
		v[mask] = b.String()
	}
	return v
}()

// sqlCheckpoints is the statement with every write.
var sqlCheckpoints = sqlCheckpointsFor[len(sqlCheckpointsFor)-1]

// ckReq is a checkpoint waiting for a writer, encoded for sqlCheckpoints.
type ckReq struct {
	p       *store.CheckpointParams
	now     time.Time
	errText *string
	reason  string
	ops     opCols
	atts    attCols
	kv      kvCols
	// res is set when the checkpoint committed; nil means the lease was stale.
	res *store.CheckpointResult
}

func newCkReq(now time.Time, p *store.CheckpointParams) (*ckReq, error) {
	// The checks (the store's own, CheckpointParams.Validate, by part) and the
	// columns are functions of their own: every run's workflow goroutine makes
	// its checkpoints through here, and the frame of all of it in one (900
	// bytes) made each of those goroutines grow its stack from 4 to 8 KiB,
	// copying it, in every checkpoint.
	if err := p.Validate(); err != nil {
		return nil, err
	}
	ck := &ckReq{p: p, now: now, reason: p.WaitReason}
	if err := ck.fill(p); err != nil {
		return nil, err
	}
	return ck, nil
}

// fill sets the checkpoint's error, reason and rows from p.
//
//go:noinline
func (ck *ckReq) fill(p *store.CheckpointParams) error {
	if p.Error != nil {
		var err error
		if ck.errText, err = errJSON(p.Error); err != nil {
			return err
		}
		if p.Status == store.StatusBlocked && ck.reason == "" {
			ck.reason = p.Error.Message
		}
	}
	if len(p.Ops) > 0 {
		if err := ck.ops.add(p.Ops); err != nil {
			return err
		}
	}
	if err := ck.addAttempts(p); err != nil {
		return err
	}
	if len(p.KV) > 0 {
		ck.kv.add(p.KV)
	}
	return nil
}

// addAttempts adds the attempt rows of p.
//
//go:noinline
func (ck *ckReq) addAttempts(p *store.CheckpointParams) error {
	if atts := p.AttemptRows(); len(atts) > 0 {
		return ck.atts.add(atts)
	}
	return nil
}

// ckColumns are the array parameters of sqlCheckpoints.
type ckColumns struct {
	ns, id, status, reason []string
	token                  []int64
	now, wake              []pgtype.Timestamptz
	errs                   []pgtype.Text
	output                 [][]byte
	evN                    []int32
	seq, fp                []int64 // the guard of each checkpoint
	rseq                   []int64 // the runs' sequences (store.Lease.RunSeq), or 0
	// opI, attI, setI, delI and evI hold, for each row of ops, atts,
	// kv.setKeys, kv.delKeys and the events, the 1-based ordinal of its
	// checkpoint in the batch; evK is each event's place among its
	// checkpoint's events, from 1.
	opI, attI, setI, delI, evI, evK []int32
	evNames                         []string
	evData                          [][]byte
	ops                             opCols
	atts                            attCols
	kv                              kvCols
}

// checkpointsStmt merges the checkpoints cks into one statement whose reader sets
// each one's res.
func checkpointsStmt(cks []*ckReq, mergeSingle bool) stmt {
	if len(cks) == 1 && !mergeSingle {
		return checkpointStmt(cks[0])
	}
	var c ckColumns
	for _, ck := range cks {
		c.add(ck)
	}
	return stmt{sql: sqlCheckpointsFor[c.mask()], args: c.args(), rows: func(rows pgx.Rows) error {
		for _, ck := range cks {
			ck.res = nil
		}
		for rows.Next() {
			var (
				i      int64
				cancel bool
			)
			if err := rows.Scan(&i, &cancel); err != nil {
				return err
			}
			ck := cks[i-1]
			ck.res = &store.CheckpointResult{CancelRequested: cancel, At: ck.now.Truncate(time.Microsecond)}
		}
		return rows.Err()
	}}
}

// add appends the checkpoint ck as the next one of the batch.
func (c *ckColumns) add(ck *ckReq) {
	p, l := ck.p, ck.p.Lease
	c.ns, c.id, c.token = append(c.ns, l.Namespace), append(c.id, l.RunID), append(c.token, l.Token)
	c.status, c.reason = append(c.status, string(p.Status)), append(c.reason, ck.reason)
	c.now = append(c.now, pgtype.Timestamptz{Time: ck.now, Valid: true})
	c.wake = append(c.wake, tsArg(timePtrArg(p.WakeAt)))
	c.errs, c.output = append(c.errs, textArg(ck.errText)), append(c.output, p.Output)
	c.evN = append(c.evN, int32(len(p.Stream)))
	c.seq, c.fp, c.rseq = append(c.seq, p.Seq), append(c.fp, p.Fingerprint), append(c.rseq, l.RunSeq)
	i := int32(len(c.ns))
	c.opI = appendN(c.opI, i, len(ck.ops.pos))
	c.attI = appendN(c.attI, i, len(ck.atts.pos))
	c.setI = appendN(c.setI, i, len(ck.kv.setKeys))
	c.delI = appendN(c.delI, i, len(ck.kv.delKeys))
	c.ops.concat(&ck.ops)
	c.atts.concat(&ck.atts)
	c.kv.concat(&ck.kv)
	for k, w := range p.Stream {
		c.evI, c.evK = append(c.evI, i), append(c.evK, int32(k+1))
		c.evNames, c.evData = append(c.evNames, w.Name), append(c.evData, w.Data)
	}
}

// mask says which writes of ckCTEs the batch has (see sqlCheckpointsFor).
func (c *ckColumns) mask() int {
	m := 0
	for i, n := range []int{len(c.evI), len(c.opI), len(c.attI), len(c.setI), len(c.delI)} {
		if n > 0 {
			m |= 1 << i
		}
	}
	return m
}

// appendN appends n copies of v to s.
func appendN(s []int32, v int32, n int) []int32 {
	for range n {
		s = append(s, v)
	}
	return s
}

// args are the parameters of sqlCheckpoints (and sqlChildEnds), in order.
func (c *ckColumns) args() []any {
	args := []any{c.ns, c.id, c.token, c.status, c.now, c.wake, c.reason, c.errs, c.output, c.evN,
		orEmpty(c.opI)}
	args = append(args, c.ops.args()...)
	args = append(args, orEmpty(c.attI))
	atts := c.atts.args() // the attempts' outcomes came last, after the batch's other columns: $39
	args = append(args, atts[:len(atts)-1]...)
	args = append(args, orEmpty(c.setI), orEmpty(c.kv.setKeys), orEmpty(c.kv.vals), orEmpty(c.delI), orEmpty(c.kv.delKeys))
	args = append(args, orEmpty(c.evI), orEmpty(c.evK), orEmpty(c.evNames), orEmpty(c.evData), c.seq, c.fp, c.rseq)
	return append(args, atts[len(atts)-1])
}

// opCols are ops as column arrays.
type opCols struct {
	pos, atts         []int32
	kinds, names      []string
	done              []bool
	results           [][]byte
	errs              []pgtype.Text
	started, finished []pgtype.Timestamptz
}

// add appends a checkpoint's ops. Writes to the same position are merged first
// (one statement may not touch a row twice): the last one wins.
func (c *opCols) add(in []*store.Op) error {
	if len(in) > 1 {
		in = lastOfEach(in, func(op *store.Op) int { return op.Position })
	}
	for _, op := range in {
		var e *string
		if op.Error != nil {
			var err error
			if e, err = errJSON(op.Error); err != nil {
				return err
			}
		}
		c.pos, c.atts = append(c.pos, int32(op.Position)), append(c.atts, int32(op.Attempts))
		c.kinds, c.names = append(c.kinds, string(op.Kind)), append(c.names, op.Name)
		c.done, c.results = append(c.done, op.Done), append(c.results, op.Result)
		c.errs = append(c.errs, textArg(e))
		c.started = append(c.started, tsArg(timeArg(op.StartedAt)))
		c.finished = append(c.finished, tsArg(timePtrArg(op.FinishedAt)))
	}
	return nil
}

// concat appends o's rows.
func (c *opCols) concat(o *opCols) {
	c.pos, c.atts = append(c.pos, o.pos...), append(c.atts, o.atts...)
	c.kinds, c.names = append(c.kinds, o.kinds...), append(c.names, o.names...)
	c.done, c.results = append(c.done, o.done...), append(c.results, o.results...)
	c.errs = append(c.errs, o.errs...)
	c.started, c.finished = append(c.started, o.started...), append(c.finished, o.finished...)
}

func (c *opCols) args() []any {
	return []any{orEmpty(c.pos), orEmpty(c.kinds), orEmpty(c.names), orEmpty(c.done),
		orEmpty(c.results), orEmpty(c.errs), orEmpty(c.atts), orEmpty(c.started), orEmpty(c.finished)}
}

// attCols are attempt rows as column arrays.
type attCols struct {
	pos, n            []int32
	errs, outcomes    []string
	started, finished []pgtype.Timestamptz
}

// add appends a checkpoint's attempts; of two writes of one attempt the last
// wins, as the upsert would have it (one statement may not write a row twice).
// Their outcomes were checked by the params' Validate (CheckpointParams' for a
// checkpoint, RunCreateParams' for a seeded history).
func (c *attCols) add(in []store.Attempt) error {
	if len(in) > 1 {
		type key struct{ pos, n int }
		in = lastOfEach(in, func(a store.Attempt) key { return key{a.Position, a.Attempt} })
	}
	for _, a := range in {
		e, err := errJSON(&a.Error)
		if err != nil {
			return err
		}
		c.pos, c.n, c.errs = append(c.pos, int32(a.Position)), append(c.n, int32(a.Attempt)), append(c.errs, *e)
		c.started = append(c.started, tsArg(timeArg(a.StartedAt)))
		c.finished = append(c.finished, tsArg(timeArg(a.FinishedAt)))
		c.outcomes = append(c.outcomes, a.Outcome)
	}
	return nil
}

func (c *attCols) concat(o *attCols) {
	c.pos, c.n, c.errs = append(c.pos, o.pos...), append(c.n, o.n...), append(c.errs, o.errs...)
	c.started, c.finished = append(c.started, o.started...), append(c.finished, o.finished...)
	c.outcomes = append(c.outcomes, o.outcomes...)
}

// args are the columns in the order of the attempts table: position, attempt,
// error, started_at, finished_at, outcome.
func (c *attCols) args() []any {
	return []any{orEmpty(c.pos), orEmpty(c.n), orEmpty(c.errs), orEmpty(c.started), orEmpty(c.finished), orEmpty(c.outcomes)}
}

// kvCols are run-store writes: the keys set with their values, and the keys
// deleted.
type kvCols struct {
	setKeys, delKeys []string
	vals             [][]byte
}

// add appends a checkpoint's run-store writes as they stand after applying them in
// order: the last write of a key wins.
func (c *kvCols) add(in []store.KVWrite) {
	if len(in) > 1 {
		in = lastOfEach(in, func(w store.KVWrite) string { return w.Key })
	}
	for _, w := range in {
		switch {
		case w.Delete:
			c.delKeys = append(c.delKeys, w.Key)
		default:
			c.setKeys, c.vals = append(c.setKeys, w.Key), append(c.vals, nonNil(w.Value))
		}
	}
}

func (c *kvCols) concat(o *kvCols) {
	c.setKeys, c.vals, c.delKeys = append(c.setKeys, o.setKeys...), append(c.vals, o.vals...), append(c.delKeys, o.delKeys...)
}

// lastOfEach returns the elements of in that no later element shares a key
// with, in their order: of writes to one place, the last. The columns' add
// methods call it only for more than one element (a checkpoint's usual one op
// needs no map), so that their frames, made on every checkpoint's goroutine,
// hold none.
//
//go:noinline
func lastOfEach[T any, K comparable](in []T, key func(T) K) []T {
	last := make(map[K]int, len(in))
	for i, x := range in {
		last[key(x)] = i
	}
	out := make([]T, 0, len(last))
	for i, x := range in {
		if last[key(x)] == i {
			out = append(out, x)
		}
	}
	return out
}

// orEmpty sends an empty array, not NULL, for a nil slice.
func orEmpty[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
