package storesqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// claimFilter restricts a claim query to the workflows (?3) and queues (?4, all
// when empty) of the claiming worker, as JSON lists.
const claimFilter = `workflow IN (SELECT value FROM json_each(?3))
	AND (?4 = '[]' OR queue IN (SELECT value FROM json_each(?4)))`

// orFail: the updates of a run's state that run on every claim, checkpoint and
// lease write are UPDATE OR FAIL. They cannot violate a constraint (no UNIQUE
// key of theirs changes, no NOT NULL column gets a NULL), and with the default
// ABORT, SQLite copies every page such a statement first touches into a
// statement journal, to undo the statement alone; that was a tenth of the
// writer's time working one-step jobs. Nothing relies on undoing one of these
// statements alone: any error other than the store's own fails the request,
// and the writer then rolls back the whole transaction (or the request's
// savepoint) itself; an I/O error without a statement journal makes SQLite roll
// back the whole transaction at once.
const (
	// sqlWakeDue makes pending the waiting runs whose time has come.
	sqlWakeDue = `UPDATE OR FAIL runs SET status = 'pending', wait_reason = '', updated_at = ?1
	WHERE namespace = ?2 AND status = 'waiting' AND available_at IS NOT NULL AND available_at <= ?1`
	// sqlExpireLeases makes pending the running runs whose lease expired.
	sqlExpireLeases = `UPDATE OR FAIL runs SET status = 'pending', lease_owner = '', lease_expires_at = NULL,
	updated_at = ?1 WHERE namespace = ?2 AND status = 'running' AND lease_expires_at <= ?1`
	// sqlClaimable selects the due pending runs of one workflow (?3) in claim
	// order: those not pinned to a version, and those pinned to one of the
	// versions of the JSON list ?6 (store.RunsClaimParams.Versions). It walks runs_pending in that order and stops after LIMIT rows
	// however large the backlog; left to itself the planner may prefer to
	// range-scan available_at and sort every due run. The claim order's final
	// "id ASC" is implied: sequence is unique.
	sqlClaimable = `SELECT sequence, priority, available_at FROM runs INDEXED BY runs_pending
	WHERE namespace = ?1 AND workflow = ?3 AND status = 'pending' AND available_at <= ?2
	AND (?4 = '[]' OR queue IN (SELECT value FROM json_each(?4)))
	AND (pin_version = 0 OR pin_version IN (SELECT value FROM json_each(?6)))
	ORDER BY priority DESC, available_at ASC, sequence ASC LIMIT ?5`
	// sqlLease leases runs. A run's new token is above every token it had before,
	// even one whose claim was lost: claims are committed without fsync (see
	// writeNoSync), and the clock has moved on by the time the store reopens.
	// It is the clock in microseconds (?5), the same for every run of the claim,
	// so that the statement needs no RETURNING (a third of its cost for a
	// thousand runs): the runs whose token is not below it already (a clock set
	// back) are left to sqlLeaseAbove. loadClaimed reads the runs, on the read
	// pool after a claim: building and scanning a thousand whole rows took the
	// writer, the store's bottleneck, about as long as the update itself.
	sqlLease = `UPDATE OR FAIL runs SET ` + leaseSet + `, lease_token = ?5 ` + leaseWhere + ` AND lease_token < ?5`
	// sqlLeaseAbove leases the runs of the claim that sqlLease left (not running
	// yet), each with its token plus one, and returns those tokens.
	sqlLeaseAbove = `UPDATE OR FAIL runs SET ` + leaseSet + `, lease_token = lease_token + 1 ` + leaseWhere +
		` AND status <> 'running' RETURNING sequence, lease_token`
	// leaseSet and leaseWhere are what sqlLease and sqlLeaseAbove share: the
	// lease of worker ?1 until ?2 taken at ?3, on the runs of the JSON list ?4.
	leaseSet = `status = 'running', lease_owner = ?1, lease_seq = 0, lease_fp = 0, lease_expires_at = ?2,
	attempts = attempts + 1, started_at = COALESCE(started_at, ?3), wait_reason = '', updated_at = ?3`
	leaseWhere = `WHERE sequence IN (SELECT value FROM json_each(?4))`
	// sqlClaimedRuns reads the runs of a list of sequences.
	sqlClaimedRuns = `SELECT ` + runCols + ` FROM runs WHERE sequence IN (SELECT value FROM json_each(?1))`
	// sqlNextDue is the earliest future time at which a run of these workflows
	// (and queues) becomes due. Each branch walks a partial index in time order
	// and stops at the first match; the pending branch names the condition of
	// runs_pending_available (available_at > created_at), which every pending
	// run due after ?2 meets, so that SQLite may read that index.
	sqlNextDue = `SELECT MIN(t) FROM (
	SELECT * FROM (SELECT available_at AS t FROM runs
		WHERE namespace = ?1 AND status = 'waiting' AND available_at IS NOT NULL
		AND available_at > ?2 AND ` + claimFilter + ` ORDER BY available_at LIMIT 1)
	UNION ALL SELECT * FROM (SELECT available_at FROM runs
		WHERE namespace = ?1 AND status = 'pending' AND available_at > created_at AND available_at > ?2
		AND ` + claimFilter + ` ORDER BY available_at LIMIT 1)
	UNION ALL SELECT * FROM (SELECT lease_expires_at FROM runs
		WHERE namespace = ?1 AND status = 'running' AND lease_expires_at > ?2
		AND ` + claimFilter + ` ORDER BY lease_expires_at LIMIT 1))`
)

// RunsClaim implements store.Store: each claimed run comes with its input,
// history and inbox whole (sqlstore.ClaimedPayloads).
func (s *Store) RunsClaim(ctx context.Context, p *store.RunsClaimParams) (*store.RunsClaimResult, error) {
	res, err := s.runsClaim(ctx, p)
	return sqlstore.ClaimedPayloads(&s.methods, ctx, res, err)
}

// runsClaim claims runs. The writer leases the runs; the runs, their
// inboxes and histories are read on the read pool once the leases are
// committed, so that the writer, which every claim and checkpoint waits for,
// does not spend its time on them.
func (s *Store) runsClaim(ctx context.Context, p *store.RunsClaimParams) (*store.RunsClaimResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("claiming runs: %w", err)
	}
	wfs, err := jsonList(p.Workflows)
	if err != nil {
		return nil, fmt.Errorf("claiming runs: %w", err)
	}
	queues, err := jsonList(append([]string{}, p.Queues...))
	if err != nil {
		return nil, fmt.Errorf("claiming runs: %w", err)
	}
	var (
		res *store.RunsClaimResult
		ls  *leases
	)
	err = s.writeNoSync(ctx, func(tx *wtx) error {
		var err error
		res, ls, err = runsClaim(tx, p, wfs, queues)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claiming runs: %w", err)
	}
	if ls != nil {
		// The leases are held: the caller going away must not leave them to
		// expire unused because the runs were not read. If the read fails (the
		// store is closing, say), the runs come back when the leases expire,
		// as a crashed worker's do.
		if res.Runs, err = loadClaimed(context.WithoutCancel(ctx), s.reads, ls); err != nil {
			return nil, fmt.Errorf("claiming runs: %w", err)
		}
	}
	return res, nil
}

// runsClaim selects and leases the runs of a claim. The result has no runs yet:
// they are the leases'.
func runsClaim(tx *wtx, p *store.RunsClaimParams, wfs, queues string) (*store.RunsClaimResult, *leases, error) {
	now := tx.now.UnixNano()
	if _, err := tx.exec(sqlWakeDue, now, p.Namespace); err != nil {
		return nil, nil, fmt.Errorf("waking due runs: %w", err)
	}
	ended, err := expireLeases(tx, p.Namespace, store.StepTimeoutGraceOr(p.StepTimeoutGrace))
	if err != nil {
		return nil, nil, fmt.Errorf("expiring leases: %w", err)
	}
	lqs, err := shared.LimitedQueues(tx, p.Namespace)
	if err != nil {
		return nil, nil, fmt.Errorf("reading queue limits: %w", err)
	}
	var (
		seqs    []int64
		limited *time.Time
	)
	if len(lqs) == 0 {
		seqs, err = claimable(tx, p, now, queues)
	} else {
		seqs, limited, err = shared.ClaimLimited(tx, p, lqs, "INDEXED BY runs_pending")
	}
	if err != nil {
		return nil, nil, fmt.Errorf("selecting runs: %w", err)
	}
	res := &store.RunsClaimResult{EndedAttempts: ended}
	var ls *leases
	if len(seqs) > 0 {
		if ls, err = leaseRuns(tx, p.Worker, tx.now.Add(p.LeaseDuration), seqs); err != nil {
			return nil, nil, err
		}
		if len(seqs) == p.Max {
			return res, ls, nil // full: no next due time (store.RunsClaimResult.NextDue)
		}
	}
	var next sql.NullInt64
	if err := tx.queryRow(sqlNextDue, p.Namespace, now, wfs, queues).Scan(&next); err != nil {
		return nil, nil, fmt.Errorf("computing next due time: %w", err)
	}
	res.NextDue = fromNSPtr(next)
	if limited != nil && (res.NextDue == nil || limited.Before(*res.NextDue)) {
		res.NextDue = limited
	}
	return res, ls, nil
}

// candidate is a claimable run, with its claim-order keys.
type candidate struct {
	seq, avail int64
	priority   int
}

// claimable returns the sequences of up to limit due runs of the workflows, in
// claim order: the best limit of each workflow, merged.
func claimable(tx *wtx, p *store.RunsClaimParams, now int64, queues string) ([]int64, error) {
	var cands []candidate
	for _, wf := range slices.Compact(slices.Sorted(slices.Values(p.Workflows))) {
		versions, err := versionList(p.Versions[wf])
		if err != nil {
			return nil, err
		}
		rows, err := tx.query(sqlClaimable, p.Namespace, now, wf, queues, p.Max, versions)
		if err != nil {
			return nil, err
		}
		for rows.Next() {
			var c candidate
			if err := rows.Scan(&c.seq, &c.priority, &c.avail); err != nil {
				rows.Close()
				return nil, err
			}
			cands = append(cands, c)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return nil, err
		}
	}
	slices.SortFunc(cands, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(b.priority, a.priority), cmp.Compare(a.avail, b.avail), cmp.Compare(a.seq, b.seq))
	})
	seqs := make([]int64, 0, min(len(cands), p.Max))
	for _, c := range cands[:min(len(cands), p.Max)] {
		seqs = append(seqs, c.seq)
	}
	return seqs, nil
}

// leases are the leases a claim took: the runs' sequences in claim order (and
// as the JSON list the statements take), and each one's new lease token.
type leases struct {
	seqs    []int64
	list    string
	token   int64           // the token of the claim's runs, but for those in above
	above   map[int64]int64 // sequence → token, of runs whose token was already at token or above
	expires time.Time
}

// tokenOf is the lease token of the run of sequence seq.
func (ls *leases) tokenOf(seq int64) int64 {
	if t, ok := ls.above[seq]; ok {
		return t
	}
	return ls.token
}

// leaseRuns leases the runs of seqs: one statement, and a second one when a
// run's token was not below the clock.
func leaseRuns(tx *wtx, worker string, expires time.Time, seqs []int64) (*leases, error) {
	list, err := json.Marshal(seqs)
	if err != nil {
		return nil, err
	}
	ls := &leases{seqs: seqs, list: string(list), token: tx.now.UnixMicro(), expires: expires}
	args := []any{worker, expires.UnixNano(), tx.now.UnixNano(), ls.list, ls.token}
	res, err := tx.exec(sqlLease, args...)
	if err != nil {
		return nil, fmt.Errorf("leasing runs: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return nil, fmt.Errorf("leasing runs: %w", err)
	}
	if int(n) < len(seqs) {
		ls.above = map[int64]int64{}
		rows, err := tx.query(sqlLeaseAbove, args[:4]...)
		if err != nil {
			return nil, fmt.Errorf("leasing runs: %w", err)
		}
		for rows.Next() {
			var seq, token int64
			if err := rows.Scan(&seq, &token); err != nil {
				rows.Close()
				return nil, fmt.Errorf("leasing runs: %w", err)
			}
			ls.above[seq] = token
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			return nil, fmt.Errorf("leasing runs: %w", err)
		}
		n += int64(len(ls.above))
	}
	if int(n) != len(seqs) {
		return nil, fmt.Errorf("leasing runs: %d of %d runs vanished", len(seqs)-int(n), len(seqs))
	}
	return ls, nil
}

// claimRuns leases the runs of seqs and reads them in the same transaction.
func claimRuns(tx *wtx, worker string, expires time.Time, seqs []int64) ([]*store.ClaimedRun, error) {
	ls, err := leaseRuns(tx, worker, expires, seqs)
	if err != nil {
		return nil, err
	}
	return loadClaimed(context.Background(), tx, ls)
}

// loadClaimed reads the leased runs, in claim order, each with its inbox and
// history; a run's first claim skips the history query: nothing has run yet.
// Read after the claim committed (RunsClaim), a run may have changed since:
// it may carry a cancellation request or more events (as if they had come just
// before the claim), and a run deleted in between (`trellis runs delete`) is
// left out. Its history cannot change: only the lease's holder writes it.
func loadClaimed(ctx context.Context, q querier, ls *leases) ([]*store.ClaimedRun, error) {
	rows, err := q.QueryContext(ctx, sqlClaimedRuns, ls.list)
	if err != nil {
		return nil, fmt.Errorf("reading claimed runs: %w", err)
	}
	bySeq := make(map[int64]*store.ClaimedRun, len(ls.seqs))
	for rows.Next() {
		run, _, err := scanRun(rows)
		if err != nil {
			rows.Close()
			return nil, fmt.Errorf("reading claimed runs: %w", err)
		}
		bySeq[run.Sequence] = &store.ClaimedRun{Run: run, LeaseToken: ls.tokenOf(run.Sequence),
			LeaseExpiresAt: ls.expires, History: []*store.Op{}, Inbox: []*store.Event{}}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, fmt.Errorf("reading claimed runs: %w", err)
	}
	// Events may reach a run before its first claim: one query loads every inbox.
	if err := loadInboxes(ctx, q, bySeq, ls.list); err != nil {
		return nil, err
	}
	claimed := make([]*store.ClaimedRun, 0, len(ls.seqs))
	for _, seq := range ls.seqs {
		cr := bySeq[seq]
		if cr == nil {
			continue
		}
		if cr.Run.Attempts > 1 {
			if cr.History, err = history(ctx, q, seq); err != nil {
				return nil, err
			}
		}
		claimed = append(claimed, cr)
	}
	return claimed, nil
}

const sqlExtend = `UPDATE OR FAIL runs SET lease_expires_at = ?1, current_step = ?5
	WHERE namespace = ?2 AND id = ?3 AND status = 'running' AND lease_token = ?4
	RETURNING cancel_requested`

// LeasesExtend implements store.Store.
func (s *Store) LeasesExtend(ctx context.Context, p *store.LeasesExtendParams) (*store.LeasesExtendResult, error) {
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("extending leases: %w", err)
	}
	if len(p.Leases) == 0 {
		return &store.LeasesExtendResult{}, nil
	}
	var res *store.LeasesExtendResult
	err := s.writeNoSync(ctx, func(tx *wtx) error {
		var err error
		res, err = leasesExtend(tx, p)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("extending leases: %w", err)
	}
	return res, nil
}

func leasesExtend(tx *wtx, p *store.LeasesExtendParams) (*store.LeasesExtendResult, error) {
	res := &store.LeasesExtendResult{}
	expires := tx.now.Add(p.Duration).UnixNano()
	steps := sqlstore.StepsOf(p)
	grace := store.StepTimeoutGraceOr(p.StepTimeoutGrace)
	for i, l := range p.Leases {
		until := expires
		// A step that ran past its timeout ends its lease now, with the step
		// kept for the claim that takes the run to record as timed out.
		timedOut := steps[i].PastDeadline(tx.now, grace)
		if timedOut {
			until = tx.now.UnixNano()
		}
		// The RETURNING row is read (Scan), never left to Exec: the C driver
		// would leave the statement in progress on the writer's connection,
		// and every later commit on it would fail.
		var cancel bool
		err := tx.queryRow(sqlExtend, until, l.Namespace, l.RunID, l.Token, sqlstore.StepText(steps[i], l.Token)).Scan(&cancel)
		switch {
		case err != nil && !errors.Is(err, sql.ErrNoRows):
			return nil, err
		case timedOut:
			tx.publish(store.RunTopic(l.Namespace, l.RunID), store.TopicReady)
			res.Lost = append(res.Lost, l.RunID)
		case err != nil: // no row: the lease is not (or no longer) this one
			res.Lost = append(res.Lost, l.RunID)
		case cancel:
			res.CancelRequested = append(res.CancelRequested, l.RunID)
		}
	}
	return res, nil
}

const sqlRelease = `UPDATE OR FAIL runs SET status = 'pending', available_at = ?1, lease_owner = '',
	lease_expires_at = NULL, updated_at = ?1,
	lease_seq = CASE WHEN ?5 = 0 THEN lease_seq ELSE ?5 END, lease_fp = CASE WHEN ?5 = 0 THEN lease_fp ELSE ?6 END
	WHERE namespace = ?2 AND id = ?3 AND status = 'running' AND lease_token = ?4 AND (?5 = 0 OR lease_seq < ?5)`

// LeaseRelease implements store.Store.
func (s *Store) LeaseRelease(ctx context.Context, p *store.LeaseReleaseParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("releasing lease: %w", err)
	}
	l := p.Lease
	err := s.write(ctx, func(tx *wtx) error {
		res, err := tx.exec(sqlRelease, tx.now.UnixNano(), l.Namespace, l.RunID, l.Token, p.Seq, p.Fingerprint)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			_, err := ckReplay(tx, l, p.Seq, p.Fingerprint)
			return err
		}
		tx.publish(store.RunTopic(l.Namespace, l.RunID), store.TopicReady)
		return nil
	})
	if err != nil {
		return fmt.Errorf("releasing lease: %w", err)
	}
	return nil
}

// versionList is a worker's versions of a workflow as the JSON list the claim
// takes; a worker serves one version, most often, and a list of one number
// needs no encoder.
func versionList(vs []int) (string, error) {
	switch len(vs) {
	case 0:
		return "[]", nil
	case 1:
		return "[" + strconv.Itoa(vs[0]) + "]", nil
	}
	b, err := json.Marshal(vs)
	return string(b), err
}
