package storepg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// claimFilter restricts a query to the claiming worker's workflows ($3) and queues
// ($4, every queue when empty).
const claimFilter = `workflow = ANY($3::text[]) AND (cardinality($4::text[]) = 0 OR queue = ANY($4::text[]))`

// A claim is five statements sent in one round trip and committed in the batch's
// transaction: set its plan (sqlClaimPlan), wake due timers, expire lapsed leases,
// see whether a queue limits claims, and lease the best due pending runs. A
// claim that leased fewer runs than asked then computes the next due time. Waking and
// expiring lock with SKIP LOCKED, so claimers of several processes never wait for
// each other (a row another transaction holds is that transaction's to move).
var (
	// sqlWakeDue makes pending the waiting runs of namespace $2 whose time ($1) has come.
	sqlWakeDue = `UPDATE runs SET status = 'pending', wait_reason = '', updated_at = $1
	WHERE sequence IN (SELECT sequence FROM runs WHERE namespace = $2 AND status = 'waiting'
		AND available_at IS NOT NULL AND available_at <= $1 FOR UPDATE SKIP LOCKED)`
	// sqlExpireLeases makes pending the running runs whose lease expired.
	//
	// Of those runs, it records the step attempt each was running, as its
	// lease's last heartbeat reported it (current_step under lease_token), as
	// lost or timed out (timed out when it ran past since + timeout + $3, the
	// grace in nanoseconds), unless it completed: its op is done (or not that
	// step: another kind or name, as a heartbeat without a position reports
	// position 0), or it has a row other than a started one, or the op counts
	// it and it has no started row. The attempt's row ($4 and $5 are the errors of a
	// lost and a timed-out one) and the step's op (not done, counting the
	// attempt) are written; it returns the attempts it recorded
	// (store.RunsClaimResult.EndedAttempts). Only runs whose lease expired are
	// read: a claim that takes back none reads nothing more.
	sqlExpireLeases = `WITH x AS (
	UPDATE runs SET status = 'pending', lease_owner = '', lease_expires_at = NULL,
	updated_at = $1 WHERE sequence IN (SELECT sequence FROM runs WHERE namespace = $2
		AND status = 'running' AND lease_expires_at <= $1 FOR UPDATE SKIP LOCKED)
	RETURNING sequence, id, workflow, lease_token, current_step
), s AS (
	SELECT x.sequence AS run_seq, x.id, x.workflow, j.name, j.attempt, COALESCE(j.position, 0) AS position,
		j.since, COALESCE(j.timeout, 0) AS timeout
	FROM x CROSS JOIN LATERAL jsonb_to_record(x.current_step::jsonb)
		AS j(name text, attempt int4, position int4, since timestamptz, timeout int8, lease int8)
	WHERE x.current_step IS NOT NULL AND j.lease = x.lease_token AND j.attempt > 0 AND j.name <> ''
), l AS (
	SELECT s.*, CASE WHEN s.timeout > 0 AND s.since + make_interval(secs => (s.timeout + $3::int8) / 1e9) <= $1
		THEN 'timed_out' ELSE 'lost' END AS outcome
	FROM s
	WHERE NOT EXISTS (SELECT 1 FROM attempts a WHERE a.run_seq = s.run_seq AND a.position = s.position
			AND a.attempt = s.attempt AND a.outcome <> 'started')
		AND NOT EXISTS (SELECT 1 FROM ops o WHERE o.run_seq = s.run_seq AND o.position = s.position
			AND (o.done OR o.kind <> 'step' OR o.name <> s.name OR (o.attempts >= s.attempt AND NOT EXISTS (SELECT 1 FROM attempts a
				WHERE a.run_seq = s.run_seq AND a.position = s.position AND a.attempt = s.attempt))))
), a AS (
	INSERT INTO attempts (run_seq, position, attempt, error, started_at, finished_at, outcome)
	SELECT run_seq, position, attempt, CASE outcome WHEN 'lost' THEN $4 ELSE $5 END, since, $1, outcome FROM l
	ON CONFLICT (run_seq, position, attempt) DO UPDATE SET error = excluded.error,
		started_at = excluded.started_at, finished_at = excluded.finished_at, outcome = excluded.outcome
), o AS (
	INSERT INTO ops (run_seq, position, kind, name, done, attempts, started_at)
	SELECT run_seq, position, 'step', name, false, attempt, since FROM l
	ON CONFLICT (run_seq, position) DO UPDATE SET attempts = GREATEST(ops.attempts, excluded.attempts)
		WHERE NOT ops.done
)
SELECT id, workflow, position, attempt, outcome FROM l`
	// sqlClaim leases up to $5 due pending runs of the worker's workflows ($3)
	// in claim order (priority, then due time, then creation), skipping the
	// rows other claimers hold. It reads runs_pending_workflow, one ordered walk
	// per workflow, so that it reads only the runs of the workflows it serves:
	// a walk of runs_pending (the namespace's pending runs in claim order,
	// filtered by workflow) read every pending run of other workflows ahead of
	// them, the whole backlog on each claim of a worker whose workflows have
	// none (40 ms beside 100,000 pending runs, on every poll; see
	// TestClaimPlanWithBacklog). A worker of one workflow walks its runs and
	// locks them as it goes (FOR UPDATE SKIP LOCKED walks past the rows other
	// claimers hold). A worker of several first counts, without locking, how
	// many of the first $5 of its runs in claim order are of each workflow
	// (top), then locks that many of each workflow in its walk: locking each
	// workflow's first $5 instead would lock up to $5 rows of every workflow
	// with a backlog and claim $5 of them. It finds those first $5 in the
	// front of the namespace's pending runs (front: $5 and 64 more, walked in
	// claim order, as the claim did before), where a worker that serves most
	// of the backlog finds them; else it reads the first $5 of each of its
	// workflows and keeps the first $5 of those (a worker of 3 workflows of 7
	// with a backlog each: 14-16 ms a claim of 1,000, where reading each
	// workflow's first $5 always took 18-24 ms). Under contention a
	// walk skips the rows other claimers hold and takes the next, so the claim
	// order holds within each workflow and nearly across them. The new token
	// is above every token issued before and above the clock in microseconds
	// ($8), so a token survives a lost claim. Each row carries its history and
	// inbox as JSON. A claimed run waits for no event (see wait_events).
	//
	// Of the runs pinned to a version (store.Run.Pinned), it takes those whose
	// "workflow@version" is in $9 (servedPins): the row is read for the queue
	// already, and a run not pinned costs one comparison more.
	//
	// It claims nothing when a queue of the namespace limits claims
	// (store.QueueStore): claimLimited does, and sqlLimited tells RunsClaim so.
	sqlClaim = `WITH w AS MATERIALIZED (
		SELECT DISTINCT unnest($3::text[]) AS name
		WHERE NOT EXISTS (SELECT 1 FROM queues WHERE namespace = $1 AND ` + sqlstore.Restricted + `)
	), front AS MATERIALIZED (
		SELECT f.workflow FROM (SELECT workflow, queue, pin_version FROM runs
			WHERE namespace = $1 AND status = 'pending' AND available_at <= $2
			ORDER BY priority DESC, available_at ASC, sequence ASC LIMIT $5 + 64) f
		WHERE cardinality($3::text[]) > 1 AND EXISTS (SELECT 1 FROM w)
			AND ` + claimServes("f") + `
		LIMIT $5
	), top AS MATERIALIZED (
		(SELECT c.workflow FROM w CROSS JOIN LATERAL (` + claimWalk("w.name", "$5", "") + `) c
		WHERE cardinality($3::text[]) > 1 AND (SELECT count(*) FROM front) < $5
		ORDER BY c.priority DESC, c.available_at ASC, c.sequence ASC LIMIT $5)
		UNION ALL SELECT workflow FROM front WHERE (SELECT count(*) FROM front) >= $5
	), n AS (
		SELECT workflow, count(*) AS n FROM top GROUP BY workflow
		UNION ALL SELECT name, $5 FROM w WHERE cardinality($3::text[]) = 1
	), picked AS (
		SELECT p.sequence FROM n CROSS JOIN LATERAL (` + claimWalk("n.workflow", "n.n", " FOR UPDATE SKIP LOCKED") + `) p
	)
	UPDATE runs r SET status = 'running', lease_owner = $6, lease_token = GREATEST(r.lease_token + 1, $8), lease_seq = 0, lease_fp = 0,
		lease_expires_at = $7, attempts = r.attempts + 1, started_at = COALESCE(r.started_at, $2),
		wait_reason = '', wait_events = NULL, updated_at = $2
	WHERE r.sequence = ANY(ARRAY(SELECT sequence FROM picked))
	RETURNING ` + runColsR + `, ` + claimedHistoryJSON + `, ` + inboxJSONCol
	// sqlLimited finds whether a queue of namespace $1 limits claims.
	sqlLimited = `SELECT EXISTS (SELECT 1 FROM queues WHERE namespace = $1 AND ` + sqlstore.Restricted + `)`
	// sqlClaimSeqs leases the pending runs of sequences $1 (chosen by
	// sqlstore.ClaimLimited), as sqlClaim leases the runs it picks.
	sqlClaimSeqs = `WITH picked AS (
		SELECT sequence FROM runs WHERE sequence = ANY($1::int8[]) AND status = 'pending' FOR UPDATE
	)
	UPDATE runs r SET status = 'running', lease_owner = $3, lease_token = GREATEST(r.lease_token + 1, $5), lease_seq = 0, lease_fp = 0,
		lease_expires_at = $4, attempts = r.attempts + 1, started_at = COALESCE(r.started_at, $2),
		wait_reason = '', wait_events = NULL, updated_at = $2
	FROM picked WHERE r.sequence = picked.sequence
	RETURNING ` + runColsR + `, ` + claimedHistoryJSON + `, ` + inboxJSONCol
	// sqlNextDue is the earliest future time at which a run of these workflows and
	// queues becomes due. Each branch walks a partial index in time order; the
	// pending branch names runs_pending_available's condition (available_at >
	// created_at, migration 0029), which every pending run due after $2 meets.
	// sqlClaimPlan keeps the claim's transaction from sorting where an index
	// gives the order: each of the claim's walks then reads runs_pending_workflow
	// in claim order and stops at its limit. Without it, a planner that
	// underestimates the pending runs (no statistics yet, as in a fresh schema,
	// or ever where autovacuum is off) reads every due pending run of the
	// namespace through another index and sorts them, on every claim: the whole
	// backlog per claim. It also turns JIT compilation off: the sorts the claim
	// does need (of at most $5 rows per workflow) then carry the planner's
	// penalty for a disabled sort, a cost far above jit_above_cost, and
	// compiling the claim took half a second on each claim.
	sqlClaimPlan = `SELECT set_config('enable_sort', 'off', true), set_config('jit', 'off', true)`
	sqlNextDue   = `SELECT LEAST(
	(SELECT available_at FROM runs WHERE namespace = $1 AND status = 'waiting'
		AND available_at > $2 AND ` + claimFilter + ` ORDER BY available_at LIMIT 1),
	(SELECT available_at FROM runs WHERE namespace = $1 AND status = 'pending'
		AND available_at > created_at AND available_at > $2 AND ` + claimFilter + ` ORDER BY available_at LIMIT 1),
	(SELECT lease_expires_at FROM runs WHERE namespace = $1 AND status = 'running'
		AND lease_expires_at > $2 AND ` + claimFilter + ` ORDER BY lease_expires_at LIMIT 1))`
)

// claimedHistoryJSON is the history of a run a claim returns: none for its first
// claim (attempts is now 1), as SQLite's claim does. A run runs nothing before
// its first claim, and a run seeded with history starts with Attempts 1
// (store.RunCreateParams.History), so its first claim makes it 2. The query of
// the ops is left out of the claims of fresh runs, most of a backlog's.
var claimedHistoryJSON = `CASE WHEN r.attempts > 1 THEN ` + historyJSON("r.sequence") + ` ELSE '[]' END`

// claimWalk is sqlClaim's walk of the due pending runs of workflow wf, of the
// worker's queues and versions, in claim order, up to limit rows, with lock as
// its locking clause. It bounds the workflow from both sides instead of naming
// it in an equality, and orders by it: with "workflow = wf" the planner takes
// the workflow for fixed and may walk runs_pending instead, whose order is then
// the same, and did in w5 (on a plan made while the table was small), reading
// the namespace's whole backlog once per workflow on every claim. So ordered,
// the walk is runs_pending_workflow's order, and the one index that gives it
// without a sort (which the claim's transaction turns off, sqlClaimPlan).
func claimWalk(wf, limit, lock string) string {
	return `SELECT workflow, priority, available_at, sequence FROM runs
			WHERE namespace = $1 AND workflow >= ` + wf + ` AND workflow <= ` + wf + `
			AND status = 'pending' AND available_at <= $2 AND ` + claimServes("runs") + `
			ORDER BY workflow, priority DESC, available_at ASC, sequence ASC LIMIT ` + limit + lock
}

// claimServes is the condition that the run of row r is of the worker's
// workflows ($3), queues ($4, every queue when empty) and versions ($9).
func claimServes(r string) string {
	return r + `.workflow = ANY($3::text[]) AND (cardinality($4::text[]) = 0 OR ` + r + `.queue = ANY($4::text[]))
			AND (` + r + `.pin_version = 0 OR (` + r + `.workflow || '@' || ` + r + `.pin_version::text) = ANY($9::text[]))`
}

// RunsClaim implements store.Store: each claimed run comes with its input,
// history and inbox whole (sqlstore.ClaimedPayloads).
func (s *Store) RunsClaim(ctx context.Context, p *store.RunsClaimParams) (*store.RunsClaimResult, error) {
	res, err := s.runsClaim(ctx, p)
	return sqlstore.ClaimedPayloads(&s.methods, ctx, res, err)
}

// runsClaim claims runs.
func (s *Store) runsClaim(ctx context.Context, p *store.RunsClaimParams) (*store.RunsClaimResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("claiming runs: %w", err)
	}
	now := s.now()
	queues := p.Queues
	if queues == nil {
		queues = []string{}
	}
	expires := now.Add(p.LeaseDuration)
	res := &store.RunsClaimResult{}
	var limited bool
	_, err := s.claimWrite(ctx,
		stmt{sql: sqlClaimPlan},
		stmt{sql: sqlWakeDue, args: []any{now, p.Namespace}},
		stmt{sql: sqlExpireLeases, args: []any{now, p.Namespace, int64(store.StepTimeoutGraceOr(p.StepTimeoutGrace)),
			lostAttemptJSON, timedOutAttemptJSON}, rows: func(rows pgx.Rows) error {
			res.EndedAttempts = res.EndedAttempts[:0] // a retried batch reads its rows again
			for rows.Next() {
				e := store.EndedAttemptInfo{Namespace: p.Namespace}
				if err := rows.Scan(&e.RunID, &e.Workflow, &e.Position, &e.Attempt, &e.Outcome); err != nil {
					return err
				}
				res.EndedAttempts = append(res.EndedAttempts, e)
			}
			return rows.Err()
		}},
		stmt{sql: sqlLimited, args: []any{p.Namespace}, rows: func(rows pgx.Rows) error {
			limited = false
			if rows.Next() {
				if err := rows.Scan(&limited); err != nil {
					return err
				}
			}
			return rows.Err()
		}},
		stmt{
			sql: sqlClaim,
			args: []any{p.Namespace, now, p.Workflows, queues, p.Max, p.Worker, expires,
				now.UnixMicro(), servedPins(p)},
			rows: func(rows pgx.Rows) (err error) {
				res.Runs, err = scanClaimed(rows, expires)
				return err
			},
		},
	)
	if err != nil {
		return nil, fmt.Errorf("claiming runs: %w", err)
	}
	if limited {
		if res, err = s.claimLimited(ctx, p, queues); err != nil {
			return nil, fmt.Errorf("claiming runs: %w", err)
		}
		return res, nil
	}
	// The next due time matters only to a claimer with slots left to fill
	// (store.RunsClaimResult.NextDue): under load, claims are full and skip the
	// query, whose planning alone cost half a millisecond. The claim has
	// committed: a failed read leaves NextDue unset (the claimer polls, and
	// TopicReady wakes it) rather than failing the call, whose runs are leased.
	if len(res.Runs) < p.Max {
		err := seam{s}.Read(ctx, func(q sqlstore.Querier) error {
			var next *time.Time
			if err := q.QueryRow(sqlNextDue, p.Namespace, now, p.Workflows, queues).Scan(&next); err != nil {
				return err
			}
			res.NextDue = utcPtr(next)
			return nil
		})
		if err != nil {
			s.log.Warn("storepg: computing the next due time after a claim", "err", err)
		}
	}
	return res, nil
}

// claimLimited claims for p in a namespace with a queue that limits claims: in one
// transaction that locks the namespace's limited queues (so that limits hold across
// claimers), sqlstore.ClaimLimited chooses the runs and sqlClaimSeqs leases them.
// Claims of such a namespace take turns; others are not held up.
func (s *Store) claimLimited(ctx context.Context, p *store.RunsClaimParams, queues []string) (*store.RunsClaimResult, error) {
	var res *store.RunsClaimResult
	err := s.inTx(ctx, func(tx *wtx) error {
		res = &store.RunsClaimResult{}
		lqs, err := shared.LimitedQueues(stx{tx}, p.Namespace)
		if err != nil {
			return fmt.Errorf("reading queue limits: %w", err)
		}
		seqs, limited, err := shared.ClaimLimited(stx{tx}, p, lqs, "")
		if err != nil {
			return err
		}
		if len(seqs) > 0 {
			expires := tx.now.Add(p.LeaseDuration)
			rows, err := tx.query(sqlClaimSeqs, seqs, tx.now, p.Worker, expires, tx.now.UnixMicro())
			if err != nil {
				return fmt.Errorf("leasing runs: %w", err)
			}
			res.Runs, err = scanClaimed(rows, expires)
			rows.Close()
			if err != nil {
				return fmt.Errorf("leasing runs: %w", err)
			}
		}
		if len(res.Runs) == p.Max {
			return nil // full: no next due time (RunsClaim)
		}
		var next *time.Time
		if err := tx.queryRow(sqlNextDue, p.Namespace, tx.now, p.Workflows, queues).Scan(&next); err != nil {
			return fmt.Errorf("computing next due time: %w", err)
		}
		res.NextDue = utcPtr(next)
		if limited != nil && (res.NextDue == nil || limited.Before(*res.NextDue)) {
			res.NextDue = limited
		}
		return nil
	})
	return res, err
}

// scanClaimed reads the claimed runs and sorts them in claim order (an UPDATE
// returns rows in no particular order).
func scanClaimed(rows pgx.Rows, expires time.Time) ([]*store.ClaimedRun, error) {
	out := []*store.ClaimedRun{}
	for rows.Next() {
		var hist, inbox []byte
		run, token, err := scanRun(suffixedInto{rows, []any{&hist, &inbox}})
		if err != nil {
			return nil, err
		}
		ops, err := decodeHistory(hist)
		if err != nil {
			return nil, err
		}
		evs, err := decodeInbox(inbox, run)
		if err != nil {
			return nil, err
		}
		out = append(out, &store.ClaimedRun{Run: run, LeaseToken: token, LeaseExpiresAt: expires.UTC(), History: ops, Inbox: evs})
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b *store.ClaimedRun) int {
		return cmp.Or(cmp.Compare(b.Run.Priority, a.Run.Priority),
			a.Run.AvailableAt.Compare(b.Run.AvailableAt), cmp.Compare(a.Run.Sequence, b.Run.Sequence))
	})
	return out, nil
}

// sqlExtend finds each lease's run by ID in a subquery of its own (OFFSET 0
// keeps the other conditions out), as sqlRunsGet does: with the status and
// token beside the ID, the planner could walk runs_running once per lease
// instead, and did before the table had statistics. It locks the runs in
// sequence order before it updates them (lockRowsInOrder), and returns the leases
// it holds, with their cancel requests.
//
// LeasesExtend runs it in two passes. The first (tail "SKIP LOCKED") skips
// the runs another transaction holds and returns them as skipped: it joins the
// writers' batches, after their checkpoints, whose transactions already hold
// other runs, and a pass that waited there for a run held by another process's
// batch, itself waiting for one of ours (a child's end that updates its parent,
// say), was a deadlock that Postgres breaks only after deadlock_timeout (1 s):
// a second's stall of both batches, a few times in every run of the engine's
// tests on Postgres. A pass that never waits is in no such cycle. The second
// pass (no tail) waits for the skipped runs, in a transaction that holds
// nothing else.
func sqlExtend(tail string) string {
	return `WITH k AS MATERIALIZED (
		SELECT l.*, s.sequence FROM unnest($2::text[], $3::text[], $4::int8[], $5::text[]) AS l(namespace, id, token, step)
		CROSS JOIN LATERAL (SELECT sequence FROM runs WHERE namespace = l.namespace AND id = l.id OFFSET 0) AS s
	), lk AS MATERIALIZED (` + lockRowsInOrder(`SELECT * FROM k`, `sequence`, tail) + `
	), u AS (UPDATE runs r SET lease_expires_at = $1, current_step = k.step
		FROM lk AS k
		WHERE r.sequence = k.sequence AND r.status = 'running' AND r.lease_token = k.token
		RETURNING r.namespace, r.id, r.cancel_requested)
	SELECT namespace, id, cancel_requested, false FROM u
	UNION ALL SELECT namespace, id, false, true FROM k WHERE sequence NOT IN (SELECT sequence FROM lk)`
}

var sqlExtendSkipping, sqlExtendWaiting = sqlExtend(`SKIP LOCKED`), sqlExtend(``)

// LeasesExtend implements store.Store.
func (s *Store) LeasesExtend(ctx context.Context, p *store.LeasesExtendParams) (*store.LeasesExtendResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("extending leases: %w", err)
	}
	if len(p.Leases) == 0 {
		return &store.LeasesExtendResult{}, nil
	}
	now := s.now()
	expires := now.Add(p.Duration)
	held := map[store.Lease]bool{}
	cancel := map[store.Lease]bool{}
	leases, steps := p.Leases, sqlstore.StepsOf(p)
	var err error
	if leases, steps, err = s.endTimedOut(ctx, now, leases, steps, store.StepTimeoutGraceOr(p.StepTimeoutGrace)); err != nil {
		return nil, fmt.Errorf("extending leases: %w", err)
	}
	var skipped []int
	if len(leases) > 0 {
		skipped, err = s.extend(ctx, expires, leases, steps, held, cancel, false)
	}
	if err == nil && len(skipped) > 0 {
		// The runs another transaction held: wait for them on their own.
		ls, ss := make([]store.Lease, len(skipped)), make([]store.RunStep, len(skipped))
		for j, i := range skipped {
			ls[j], ss[j] = leases[i], steps[i]
		}
		_, err = s.extend(ctx, expires, ls, ss, held, cancel, true)
	}
	if err != nil {
		return nil, fmt.Errorf("extending leases: %w", err)
	}
	res := &store.LeasesExtendResult{}
	for _, l := range p.Leases {
		key := store.Lease{Namespace: l.Namespace, RunID: l.RunID}
		switch {
		case !held[key]:
			res.Lost = append(res.Lost, l.RunID)
		case cancel[key]:
			res.CancelRequested = append(res.CancelRequested, l.RunID)
		}
	}
	return res, nil
}

// extend is one pass of LeasesExtend over leases, steps[i] the step of
// leases[i] (see sqlExtend): it records the leases it holds in held, their
// cancel requests in cancel, and returns the indexes of the leases whose runs
// another transaction held (none when wait). The first pass joins the writers'
// batches; the second commits on a connection of its own.
func (s *Store) extend(ctx context.Context, expires time.Time, leases []store.Lease, steps []store.RunStep,
	held, cancel map[store.Lease]bool, wait bool) ([]int, error) {
	nss, ids, tokens := make([]string, len(leases)), make([]string, len(leases)), make([]int64, len(leases))
	stepTexts := make([]*string, len(leases))
	byKey := make(map[store.Lease]int, len(leases))
	for i, l := range leases {
		nss[i], ids[i], tokens[i] = l.Namespace, l.RunID, l.Token
		if t, ok := sqlstore.StepText(steps[i], l.Token).(string); ok {
			stepTexts[i] = &t
		}
		byKey[store.Lease{Namespace: l.Namespace, RunID: l.RunID}] = i
	}
	var skipped []int
	passHeld, passCancel := map[store.Lease]bool{}, map[store.Lease]bool{}
	st := stmt{
		sql:  sqlExtendSkipping,
		args: []any{expires, nss, ids, tokens, stepTexts},
		rows: func(rows pgx.Rows) error {
			// A retried batch reads its rows again: keep only the last reading.
			skipped = skipped[:0]
			clear(passHeld)
			clear(passCancel)
			for rows.Next() {
				var (
					l       store.Lease
					c, skip bool
				)
				if err := rows.Scan(&l.Namespace, &l.RunID, &c, &skip); err != nil {
					return err
				}
				if skip {
					if i, ok := byKey[l]; ok {
						skipped = append(skipped, i)
					}
					continue
				}
				passHeld[l], passCancel[l] = true, c
			}
			return rows.Err()
		},
	}
	var err error
	if wait {
		st.sql = sqlExtendWaiting
		_, err = s.claimWrite(ctx, st)
	} else {
		_, err = s.writeNoSync(ctx, st)
	}
	if err != nil {
		return nil, err
	}
	for l := range passHeld {
		held[l], cancel[l] = true, passCancel[l]
	}
	return skipped, nil
}

// sqlEndLeases ends the leases ($2 namespaces, $3 IDs, $4 tokens) now ($1),
// keeping the steps ($5) their heartbeat reported: LeasesExtend's for steps
// that ran past their timeout plus the grace. The claim that takes the runs
// records those attempts as timed out.
const sqlEndLeases = `UPDATE runs r SET lease_expires_at = $1, current_step = l.step
	FROM unnest($2::text[], $3::text[], $4::int8[], $5::text[]) AS l(namespace, id, token, step)
	WHERE r.namespace = l.namespace AND r.id = l.id AND r.status = 'running' AND r.lease_token = l.token`

// endTimedOut ends the leases whose step ran past its deadline
// (store.RunStep.PastDeadline) and returns the others, with their steps. In the
// common case (none past) it writes nothing and returns leases and steps.
func (s *Store) endTimedOut(ctx context.Context, now time.Time, leases []store.Lease, steps []store.RunStep,
	grace time.Duration) ([]store.Lease, []store.RunStep, error) {
	past := -1
	for i := range steps {
		if steps[i].PastDeadline(now, grace) {
			past = i
			break
		}
	}
	if past < 0 {
		return leases, steps, nil
	}
	var (
		nss, ids, texts []string
		tokens          []int64
		topics          = []string{store.TopicReady}
		keepL           = slices.Clone(leases[:past])
		keepS           = slices.Clone(steps[:past])
	)
	for i := past; i < len(leases); i++ {
		l := leases[i]
		if !steps[i].PastDeadline(now, grace) {
			keepL, keepS = append(keepL, l), append(keepS, steps[i])
			continue
		}
		text, _ := sqlstore.StepText(steps[i], l.Token).(string)
		nss, ids, tokens, texts = append(nss, l.Namespace), append(ids, l.RunID), append(tokens, l.Token), append(texts, text)
		topics = append(topics, store.RunTopic(l.Namespace, l.RunID))
	}
	_, err := s.write(ctx, topics, stmt{sql: sqlEndLeases, args: []any{now, nss, ids, tokens, texts}})
	return keepL, keepS, err
}

var sqlRelease = `UPDATE runs SET status = 'pending', available_at = $1, lease_owner = '',
	lease_expires_at = NULL, updated_at = $1, ` + releaseGuardSet + `
	WHERE sequence = ` + seqOf("$2", "$3") + ` AND status = 'running' AND lease_token = $4` + releaseGuardWhere

var releaseGuardSet, releaseGuardWhere = ckGuard("$5", "$6")

// LeaseRelease implements store.Store.
func (s *Store) LeaseRelease(ctx context.Context, p *store.LeaseReleaseParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("releasing lease: %w", err)
	}
	l := p.Lease
	st := stmt{
		sql:  sqlRelease,
		args: []any{s.now(), l.Namespace, l.RunID, l.Token, p.Seq, p.Fingerprint},
		tag: func(tag pgconn.CommandTag) error {
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("%w: run %q token %d", store.ErrLeaseLost, l.RunID, l.Token)
			}
			return nil
		},
	}
	_, err := s.write(ctx, []string{store.RunTopic(l.Namespace, l.RunID), store.TopicReady}, st)
	if err != nil && p.Seq > 0 && errors.Is(err, store.ErrLeaseLost) {
		_, err = s.leaseReplay(ctx, l, p.Seq, p.Fingerprint) // perhaps a retry of an applied release
	}
	if err != nil {
		return fmt.Errorf("releasing lease: %w", err)
	}
	return nil
}

// lostAttemptJSON and timedOutAttemptJSON are the errors sqlExpireLeases
// writes on the attempts it records.
var lostAttemptJSON, timedOutAttemptJSON = mustErrJSON(store.LostAttemptError), mustErrJSON(store.TimedOutAttemptError)

func mustErrJSON(e store.ErrorInfo) string {
	s, err := errJSON(&e)
	if err != nil {
		panic(err)
	}
	return *s
}

// servedPins lists the versions a claim serves (store.RunsClaimParams.Versions)
// as sqlClaim's "workflow@version" texts. A version has no "@": a workflow
// name that has one is still read unambiguously, up to its last "@".
func servedPins(p *store.RunsClaimParams) []string {
	out := []string{}
	for _, wf := range p.Workflows {
		for _, v := range p.Versions[wf] {
			out = append(out, wf+"@"+strconv.Itoa(v))
		}
	}
	return out
}
