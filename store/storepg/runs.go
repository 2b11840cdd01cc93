package storepg

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

const runInsertCols = `INSERT INTO runs (namespace, id, workflow_id, workflow, queue, priority,
	status, attempts, lease_owner, lease_token, lease_expires_at, started_at,
	version, input, deadline, available_at, created_at, updated_at, concurrency_key, trace_parent, pin_version, retry)`

// createdClaim is the status and lease columns ($12..$17) of a new run: those a
// create with a claim passes, unless the run's queue limits claims (see
// store.QueueStore), which leaves the run pending for an ordinary claim. It
// reads q.restricted, which createdRestricted computes once for all six: with
// the queue's check in each column, Postgres planned the check six times, 0.19
// ms of planning a create against 0.07 (30 Nov 2026), on every create, since
// the store's connections plan each execution (plan_cache_mode, poolConfig).
var createdClaim = func() string {
	cols := []struct{ param, pending string }{
		{"$12::text", "'pending'"}, {"$13::int4", "0"}, {"$14::text", "''"},
		{"$15::int8", "0"}, {"$16::timestamptz", "NULL"}, {"$17::timestamptz", "NULL"},
	}
	out := make([]string, len(cols))
	for i, c := range cols {
		out[i] = "CASE WHEN q.restricted THEN " + c.pending + " ELSE " + c.param + " END"
	}
	return strings.Join(out, ", ")
}()

// createdRestricted is the one-row FROM item whose restricted says whether a
// create with a claim ($12 'running') goes to a queue that limits claims.
// OFFSET 0 keeps it one evaluation of its own.
const createdRestricted = `(SELECT ($12::text = 'running' AND EXISTS (SELECT 1 FROM queues q WHERE q.namespace = $1
		AND q.name = $5 AND ` + sqlstore.Restricted + `)) AS restricted OFFSET 0) q`

// RunCreate statements, one per reuse policy. Each returns (created, runCols...) for
// the new run and, for ReuseReturnExisting, the latest existing one; no row means
// the start was rejected. ON CONFLICT DO NOTHING covers the run ID and the partial
// unique index on active workflow IDs, so a rejected start never aborts the batch;
// the default policy's statement adds implicitFree, the rule's part that index
// does not hold. The other two look at every run with the workflow ID
// (workflowIDIs), which covers it. $12..$17 are the status, attempts and lease of
// a run created already claimed (a pending run without attempts or lease
// otherwise).
var (
	sqlRunCreate = runInsertSelect + `
	WHERE ` + implicitFree("$1", "$2", "$3") + `
	ON CONFLICT DO NOTHING RETURNING true, ` + runCols
	// sqlRunCreateKeyed is sqlRunCreate for the keyed creator's lone create
	// (keyedOne), with its key recorded in the same statement (keyRecord).
	sqlRunCreateKeyed = `WITH ins AS (` + runInsertSelect + `
	WHERE ` + implicitFree("$1", "$2", "$3") + `
	ON CONFLICT DO NOTHING RETURNING true AS created, ` + runCols + `
	), ` + keyRecord + `
	SELECT * FROM ins`
	// sqlRunCreateOwnID and sqlRunCreateOwnIDKeyed are sqlRunCreate and
	// sqlRunCreateKeyed for a run whose workflow ID is its run ID (a start
	// that names no workflow ID), for which implicitFree holds: without its
	// lookup of runs, the statement reads no index of runs and is planned once
	// (stmt.generic). A generic plan of that lookup, made on a table without
	// statistics, may read runs_status (every run of the namespace).
	sqlRunCreateOwnID = runInsertSelect + `
	ON CONFLICT DO NOTHING RETURNING true, ` + runCols
	sqlRunCreateOwnIDKeyed = `WITH ins AS (` + runInsertSelect + `
	ON CONFLICT DO NOTHING RETURNING true AS created, ` + runCols + `
	), ` + keyRecord + `
	SELECT * FROM ins`
	runInsertSelect = runInsertCols + `
	SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::int4, ` + createdClaim + `, $7::int4,
	$8::bytea, $9::timestamptz, $10::timestamptz, $11::timestamptz, $11::timestamptz, $18::text, $19::text, $20::int4, $21::text
	FROM ` + createdRestricted
	sqlRunCreateReject = runInsertSelect + `
	WHERE NOT EXISTS (SELECT 1 FROM runs WHERE namespace = $1 AND ` + workflowIDIs("$1", "$3") + `)
	ON CONFLICT DO NOTHING RETURNING true, ` + runCols
	sqlRunCreateReturnExisting = `WITH latest AS (
		SELECT ` + runCols + ` FROM runs WHERE namespace = $1 AND ` + workflowIDIs("$1", "$3") + `
		ORDER BY sequence DESC LIMIT 1
	), ins AS (` + runInsertSelect + `
		WHERE NOT EXISTS (SELECT 1 FROM latest)
		ON CONFLICT DO NOTHING RETURNING ` + runCols + `
	)
	SELECT true, * FROM ins UNION ALL SELECT false, * FROM latest`
)

// keyedLone is the keyed creator's statement for a lone create of each
// statement of the default reuse policy: the same create, with its key
// recorded in the same statement (keyRecord).
var keyedLone = map[string]string{sqlRunCreate: sqlRunCreateKeyed, sqlRunCreateOwnID: sqlRunCreateOwnIDKeyed}

// keyRecord records the idempotency key of a keyed lone create (ins, the
// create's insert) in the create's own statement, once the insert created the
// run: the key ($1, $22) with its fingerprint ($23), the response of the
// run's status, pending ($24, $25) or claimed ($26, $27), rendered before
// (keyedOne), and the run's sequence. Without ON CONFLICT: a key recorded
// already (a retry, a reuse, a concurrent first try, an expired key) fails the
// statement, which creates nothing then, and the keyed creator decides in a
// transaction of its own (keyedCreates).
const keyRecord = `k AS (
		INSERT INTO idempotency_keys (namespace, key, fingerprint, status, body, run_seq, created_at)
		SELECT $1, $22::text, $23::bytea, CASE WHEN ins.status = 'running' THEN $26::int4 ELSE $24::int4 END,
			CASE WHEN ins.status = 'running' THEN $27::bytea ELSE $25::bytea END, ins.sequence, $11::timestamptz
		FROM ins
	)`

// keyInsertedHere is the condition that the idempotency key (namespace ns, key
// key) was inserted or taken over by the statement's own transaction, which
// its row's xmin tells: a keyed create is made only then.
func keyInsertedHere(ns, key string) string {
	return `EXISTS (SELECT 1 FROM idempotency_keys k WHERE k.namespace = ` + ns + ` AND k.key = ` + key + `
		AND k.xmin = pg_current_xact_id()::xid)`
}

// RunCreate implements sqlstore.Own: store.Store's RunCreate, under the payloads stored apart.
func (d seam) RunCreate(ctx context.Context, p *store.RunCreateParams) (*store.RunCreateResult, error) {
	s := d.s
	st, cr, err := s.runCreateStmt(p)
	if err != nil {
		return nil, fmt.Errorf("creating run: %w", err)
	}
	res := cr.res
	topics := []string{store.RunTopic(p.Namespace, p.ID)}
	if p.Claim == nil || (p.AvailableAt != nil && p.AvailableAt.After(s.now())) {
		// A run created claimed is no work for another worker.
		topics = append(topics, store.TopicReady)
	}
	stmts := []stmt{st}
	if len(p.History) > 0 {
		seed, err := seedStmt(p)
		if err != nil {
			return nil, fmt.Errorf("creating run: %w", err)
		}
		stmts = append(stmts, seed)
	}
	result := func() (*store.RunCreateResult, error) {
		if *res == nil {
			return nil, store.RunExistsError(p.ID, p.WorkflowID, p.Reuse)
		}
		return *res, nil
	}
	var out *store.RunCreateResult
	if mergeable(p) {
		cr.single = st
		if _, err = s.submit(ctx, &request{ctx: ctx, cr: cr, topics: topics, done: make(chan error, 1)}); err == nil {
			out, err = result()
		}
	} else if p.Idempotency == nil {
		if _, err = s.write(ctx, topics, stmts...); err == nil {
			out, err = result()
		}
	} else if len(stmts) == 1 {
		out, err = s.createKeyed(ctx, &keyedReq{p: p, create: st, cr: cr, res: res, topics: topics}) // see keyedcreate.go
	} else {
		err = s.writeGuarded(ctx, p.Namespace, p.Idempotency, topics, stmts, func() (any, error) {
			out, err = result()
			return out, err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("creating run: %w", err)
	}
	return out, nil
}

// runCreateStmt validates p and returns its statement, whose reader stores the
// result in *cr.res (nil: the start was rejected), and the create's values for
// a merged statement (cr; its single is left to the caller).
func (s *Store) runCreateStmt(p *store.RunCreateParams) (stmt, *crReq, error) {
	if err := p.Validate(); err != nil {
		return stmt{}, nil, err
	}
	now := s.now()
	avail := now
	if p.AvailableAt != nil {
		avail = *p.AvailableAt
	}
	query := sqlRunCreate
	switch {
	case p.Reuse == store.ReuseReject:
		query = sqlRunCreateReject
	case p.Reuse == store.ReuseReturnExisting:
		query = sqlRunCreateReturnExisting
	case p.WorkflowID == p.ID:
		query = sqlRunCreateOwnID
	}
	retry, err := store.RetryColumn(p.Retry)
	if err != nil {
		return stmt{}, nil, err
	}
	res := new(*store.RunCreateResult)
	claim := createClaim(now, avail, p.Claim)
	status := claim.args()
	if len(p.History) > 0 {
		status[1] = 1 // a seeded run counts the run it came from (see store.RunCreateParams.History)
	}
	return stmt{
		sql: query, generic: query == sqlRunCreateOwnID,
		args: append([]any{p.Namespace, p.ID, p.WorkflowID, p.Workflow, p.Queue, p.Priority, p.Version,
			p.Input, timePtrArg(p.Deadline), avail, now}, append(status, p.ConcurrencyKey, p.TraceParent, pinArg(p), retry)...),
		rows: func(rows pgx.Rows) (err error) {
			*res, err = scanCreated(rows, claim)
			return err
		},
	}, &crReq{p: p, now: now, avail: avail, claim: claim, res: res}, nil
}

// tableRef matches the references to Trellis' tables in its statements.
var tableRef = regexp.MustCompile(`\b(INTO|FROM|UPDATE|JOIN) (runs|ops|attempts|kv|queues)\b`)

// schemaSQL qualifies the tables of a statement with the store's schema, for a
// statement run on a connection that is not the store's (RunCreateTx).
func (s *Store) schemaSQL(sql string) string {
	if q, ok := s.qualified.Load(sql); ok {
		return q.(string)
	}
	q := tableRef.ReplaceAllString(sql, "$1 "+pgx.Identifier{s.cfg.Schema}.Sanitize()+".$2")
	s.qualified.Store(sql, q)
	return q
}

// newClaim is the lease of a run created already claimed.
type newClaim struct {
	worker  string
	token   int64
	expires time.Time
	started time.Time
}

// createClaim returns the lease a create with claim c gives the new run, or nil
// when c is nil or the run is not yet available.
func createClaim(now, avail time.Time, c *store.CreateClaim) *newClaim {
	if c == nil || avail.After(now) {
		return nil
	}
	// A fresh run's first token: the same clock floor claims use (see sqlClaim).
	return &newClaim{worker: c.Worker, token: now.UnixMicro(), expires: now.Add(c.LeaseDuration), started: now}
}

// args are the status and lease parameters ($12..$17) of the create statements.
func (c *newClaim) args() []any {
	if c == nil {
		return []any{string(store.StatusPending), 0, "", int64(0), nil, nil}
	}
	return []any{string(store.StatusRunning), 1, c.worker, c.token, c.expires, c.started}
}

// scanCreated reads the first row of a RunCreate statement (nil: no row). A created
// run with a claim is returned with its lease.
func scanCreated(rows pgx.Rows, claim *newClaim) (*store.RunCreateResult, error) {
	if !rows.Next() {
		return nil, nil
	}
	var created bool
	run, token, err := scanRun(prefixed{rows, []any{&created}})
	if err != nil {
		return nil, err
	}
	res := &store.RunCreateResult{Run: run, Created: created}
	if created && claim != nil && run.Status == store.StatusRunning {
		res.Claimed = &store.ClaimedRun{Run: run, LeaseToken: token, LeaseExpiresAt: *run.LeaseExpiresAt,
			History: []*store.Op{}, Inbox: []*store.Event{}}
	}
	return res, nil
}

// prefixed scans extra leading columns before the ones scanRun reads.
type prefixed struct {
	sc  scanner
	pre []any
}

func (p prefixed) Scan(dest ...any) error { return p.sc.Scan(append(p.pre, dest...)...) }

// suffixed scans extra trailing columns (ignored) after the ones scanRun reads.
type suffixed struct {
	sc scanner
	n  int
}

func (p suffixed) Scan(dest ...any) error { return p.sc.Scan(append(dest, make([]any, p.n)...)...) }

// notifyRun is a RETURNING (or select-list) expression that notifies TopicReady and
// the run's topic; $N placeholders are the channel and the sender's prefix.
func notifyRun(ch, prefix string) string {
	return `pg_notify(` + ch + `, ` + prefix + ` || namespace || '/' || id)`
}

// Run state changes by reference ($1 namespace, $2 ref). Each returns the updated row
// and notifies its topics.
var (
	sqlResume = `UPDATE runs SET status = 'pending', available_at = $3, wait_reason = '',
	error = NULL, updated_at = $3 WHERE sequence = ` + refSeq + ` AND status = 'blocked'
	RETURNING ` + runCols + `, ` + notifyRun("$4", "$5")
	sqlRefStatus = `SELECT status FROM runs WHERE sequence = ` + refSeq
)

// runReader returns a statement reader that stores the updated run, if any, in *dst.
func runReader(dst **store.Run) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		*dst = nil
		if !rows.Next() {
			return nil
		}
		run, _, err := scanRun(suffixed{rows, 1})
		*dst = run
		return err
	}
}

// statusReader returns a statement reader that stores the run's status ("" when no
// run matched) in *dst.
func statusReader(dst *store.Status) func(pgx.Rows) error {
	return func(rows pgx.Rows) error {
		*dst = ""
		if !rows.Next() {
			return nil
		}
		var s string
		err := rows.Scan(&s)
		*dst = store.Status(s)
		return err
	}
}

// runPrefix is the start of a payload notifying TopicReady and a run topic.
func (s *Store) runPrefix() string { return s.id + "\n" + store.TopicReady + "\nrun:" }

// RunResume implements sqlstore.Own: store.Store's RunResume, under the payloads stored apart.
func (d seam) RunResume(ctx context.Context, p *store.RunResumeParams) (*store.Run, error) {
	s := d.s
	if err := p.Idempotency.Validate(); err != nil {
		return nil, fmt.Errorf("resuming run: %w", err)
	}
	var (
		run    *store.Run
		status store.Status
	)
	stmts := []stmt{
		{sql: sqlResume, args: []any{p.Namespace, p.Ref, s.now(), s.channel, s.runPrefix()}, rows: runReader(&run)},
		{sql: sqlRefStatus, args: []any{p.Namespace, p.Ref}, rows: statusReader(&status)},
	}
	result := func() (any, error) {
		switch {
		case run != nil:
			return run, nil
		case status == "":
			return nil, store.RunNotFound(p.Namespace, p.Ref)
		case status.Terminal():
			return nil, fmt.Errorf("%w: run %q is %s", store.ErrRunFinished, p.Ref, status)
		default:
			return nil, fmt.Errorf("%w: run %q is %s", store.ErrRunNotBlocked, p.Ref, status)
		}
	}
	var err error
	if p.Idempotency == nil {
		if _, err = s.write(ctx, nil, stmts...); err == nil {
			_, err = result()
		}
	} else {
		err = s.writeGuarded(ctx, p.Namespace, p.Idempotency, nil, stmts, result)
	}
	if err != nil {
		return nil, fmt.Errorf("resuming run: %w", err)
	}
	s.hub.Publish(store.RunTopic(run.Namespace, run.ID), store.TopicReady)
	return run, nil
}

const sqlResumeBlocked = `WITH u AS (
	UPDATE runs SET status = 'pending', available_at = $1, wait_reason = '', error = NULL, updated_at = $1
	WHERE namespace = $2 AND status = 'blocked' AND workflow = ANY($3::text[])
	AND (cardinality($6::text[]) = 0 OR queue = ANY($6::text[]))
	RETURNING id
) SELECT id, pg_notify($4, $5 || id) FROM u`

// RunsResumeBlocked implements store.Store.
func (s *Store) RunsResumeBlocked(ctx context.Context, p *store.RunsResumeBlockedParams) (int, error) {
	if len(p.Workflows) == 0 {
		return 0, nil
	}
	var ids []string
	st := stmt{
		sql:  sqlResumeBlocked,
		args: []any{s.now(), p.Namespace, p.Workflows, s.channel, s.runPrefix() + p.Namespace + "/", orEmpty(p.Queues)},
		rows: func(rows pgx.Rows) error {
			ids = ids[:0]
			for rows.Next() {
				var id string
				if err := rows.Scan(&id, nil); err != nil {
					return err
				}
				ids = append(ids, id)
			}
			return nil
		},
	}
	if _, err := s.write(ctx, nil, st); err != nil {
		return 0, fmt.Errorf("resuming blocked runs: %w", err)
	}
	if len(ids) > 0 {
		topics := []string{store.TopicReady}
		for _, id := range ids {
			topics = append(topics, store.RunTopic(p.Namespace, id))
		}
		s.hub.Publish(topics...)
	}
	return len(ids), nil
}

// sqlRunSeed writes the recorded ops, failed attempts and run store of a seeded
// create (RunCreateParams.History) after its insert, in the same transaction; it
// writes nothing when the insert was rejected.
const sqlRunSeed = `WITH f AS (SELECT sequence FROM runs WHERE namespace = $1 AND id = $2),
	o AS (INSERT INTO ops (run_seq, position, kind, name, done, result, error, attempts, started_at, finished_at)
		SELECT f.sequence, x.* FROM f, unnest($3::int4[], $4::text[], $5::text[], $6::bool[], $7::bytea[],
			$8::text[], $9::int4[], $10::timestamptz[], $11::timestamptz[]) AS x),
	a AS (INSERT INTO attempts (run_seq, position, attempt, error, started_at, finished_at, outcome)
		SELECT f.sequence, x.* FROM f, unnest($12::int4[], $13::int4[], $14::text[], $15::timestamptz[],
			$16::timestamptz[], $17::text[]) AS x),
	k AS (INSERT INTO kv (run_seq, key, value)
		SELECT f.sequence, x.* FROM f, unnest($18::text[], $19::bytea[]) AS x)
	SELECT 1`

// seedStmt is the statement that seeds a new run's history (see sqlRunSeed).
func seedStmt(p *store.RunCreateParams) (stmt, error) {
	var ops opCols
	var atts attCols
	var kv kvCols
	if err := ops.add(p.History); err != nil {
		return stmt{}, err
	}
	if err := atts.add(p.SeedCheckpoint().AttemptRows()); err != nil {
		return stmt{}, err
	}
	kv.add(p.KV) // a fresh run store: deleted keys are simply absent
	args := append([]any{p.Namespace, p.ID}, ops.args()...)
	args = append(args, atts.args()...)
	args = append(args, orEmpty(kv.setKeys), orEmpty(kv.vals))
	return stmt{sql: sqlRunSeed, args: args}, nil
}

// pinArg is the pin_version of the run p creates (0: not pinned).
func pinArg(p *store.RunCreateParams) int32 {
	if p.Pinned {
		return int32(p.Version)
	}
	return 0
}
