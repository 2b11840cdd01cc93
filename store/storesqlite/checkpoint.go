package storesqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

const (
	sqlOpUpsert = `INSERT INTO ops (run_seq, position, kind, name, done, result, error,
	attempts, started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
	ON CONFLICT (run_seq, position) DO UPDATE SET kind = excluded.kind, name = excluded.name,
	done = excluded.done, result = excluded.result, error = excluded.error,
	attempts = excluded.attempts, started_at = excluded.started_at,
	finished_at = excluded.finished_at`
	// sqlAttemptUpsert writes an attempt's row, replacing the one it has (a
	// started row by the attempt's end).
	sqlAttemptUpsert = `INSERT INTO attempts (run_seq, position, attempt, error, started_at,
	finished_at, outcome) VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (run_seq, position, attempt)
	DO UPDATE SET error = excluded.error, started_at = excluded.started_at,
	finished_at = excluded.finished_at, outcome = excluded.outcome`
	sqlKVSet = `INSERT INTO kv (run_seq, key, value) VALUES (?, ?, ?)
	ON CONFLICT (run_seq, key) DO UPDATE SET value = excluded.value`
	sqlKVDelete = `DELETE FROM kv WHERE run_seq = ? AND key = ?`
)

// Run state changes of a checkpoint. Each is fenced: it changes the run only if
// the lease (?2 namespace, ?3 run ID, ?4 token) is current and, for a guarded
// checkpoint (?5 its Seq, above 0), the lease has not applied it yet; so it
// doubles as the lease check. A guarded one keeps its Seq and fingerprint (?6) in
// the row. ?1 is now; each statement's own parameters follow from ?7.
//
// The updates are UPDATE OR FAIL (see orFail).
const (
	ckWhere = ` WHERE namespace = ?2 AND id = ?3 AND status = 'running' AND lease_token = ?4
	AND (?5 = 0 OR lease_seq < ?5)`
	ckFence = ckWhere + ` RETURNING sequence, cancel_requested, stream_seq`
	// ckGuard keeps a guarded checkpoint's key in the row.
	ckGuard = `lease_seq = CASE WHEN ?5 = 0 THEN lease_seq ELSE ?5 END,
	lease_fp = CASE WHEN ?5 = 0 THEN lease_fp ELSE ?6 END`
	// sqlCkRunning only checks the lease: an unguarded checkpoint that keeps the
	// run running changes nothing in its row (UpdatedAt tracks changes of state),
	// unless it appends stream events (sqlCkRunningStream, which also keeps a
	// guarded checkpoint's key).
	sqlCkRunning = `SELECT sequence, cancel_requested, stream_seq FROM runs` + ckWhere
	// sqlCkRunningStream takes the sequences of ?7 stream events.
	sqlCkRunningStream = `UPDATE OR FAIL runs SET stream_seq = stream_seq + ?7, ` + ckGuard + ckFence
	// sqlCkWaiting hands a run whose cancellation was requested back instead
	// (pending, due now): waiting, it would keep the cancellation until the wait
	// ended on its own.
	sqlCkWaiting = `UPDATE OR FAIL runs SET
	status = CASE WHEN cancel_requested THEN 'pending' ELSE 'waiting' END,
	available_at = CASE WHEN cancel_requested THEN ?1 ELSE ?7 END,
	wait_reason = CASE WHEN cancel_requested THEN '' ELSE ?8 END,
	wait_events = CASE WHEN cancel_requested THEN NULL ELSE ?9 END,
	lease_owner = '', lease_expires_at = NULL, updated_at = ?1, stream_seq = stream_seq + ?10, ` + ckGuard + ckFence
	sqlCkBlocked = `UPDATE OR FAIL runs SET status = 'blocked', error = ?7, wait_reason = ?8,
	lease_owner = '', lease_expires_at = NULL, updated_at = ?1, stream_seq = stream_seq + ?9, ` + ckGuard + ckFence
	sqlCkPending = `UPDATE OR FAIL runs SET status = 'pending', available_at = ?1, wait_reason = '',
	lease_owner = '', lease_expires_at = NULL, updated_at = ?1, stream_seq = stream_seq + ?7, ` + ckGuard + ckFence
	// sqlCkFinished also returns the run's place in a parent's group (NULLs for a
	// run that is no child), so that a child's end is counted without a query.
	sqlCkFinished = `UPDATE OR FAIL runs SET status = ?7, output = ?8, error = ?9, wait_reason = '',
	lease_owner = '', lease_expires_at = NULL, finished_at = ?1, updated_at = ?1,
	stream_seq = stream_seq + ?10, ` + ckGuard + ckWhere + ` RETURNING sequence, cancel_requested, stream_seq, parent_seq, parent_position`
	// sqlCkReplay reads what tells a retry of a guarded write that was applied
	// from a stale lease (see store.CheckpointParams.Seq).
	sqlCkReplay = `SELECT lease_token, lease_seq, lease_fp, cancel_requested, updated_at FROM runs
	WHERE namespace = ?1 AND id = ?2`
)

// Checkpoint implements store.Store: its big payloads are moved apart first.
func (s *Store) Checkpoint(ctx context.Context, p *store.CheckpointParams) (*store.CheckpointResult, error) {
	p, err := sqlstore.CheckpointPayloads(&s.methods, ctx, p)
	if err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("checkpointing: %w", err)
	}
	errText, err := errJSON(p.Error)
	if err != nil {
		return nil, fmt.Errorf("checkpointing: %w", err)
	}
	r, f := checkpointRequest(ctx, p, errText)
	if err := s.submit(ctx, r); err != nil {
		return nil, fmt.Errorf("checkpointing: %w", err)
	}
	return f.res, nil
}

// checkpointRequest is the writer's request for checkpoint p: f.res holds its
// result once the request is answered without an error.
func checkpointRequest(ctx context.Context, p *store.CheckpointParams, errText any) (r *request, f *finish) {
	f = &finish{p: p, errText: errText}
	r = &request{ctx: ctx, done: make(chan error, 1), apply: func(tx *wtx) error {
		var err error
		f.res, err = checkpoint(tx, p, errText)
		return err
	}}
	if onlyFinishes(p) {
		r.fin = f
	}
	return r, f
}

// ckRow is what a checkpoint's fenced status update returns.
type ckRow struct {
	seq                 int64
	cancel              bool
	streamSeq           int64         // the run's last stream sequence, after this checkpoint's events
	parentSeq, position sql.NullInt64 // of a child run that finished
}

// checkpoint writes a checkpoint. The NoEvents guard is checked before anything
// is written; the fenced status update is the lease check. Failures after it
// (an invalid Consume, a taken child ID) leave the request dirty, so its batch
// is replayed with savepoints and the checkpoint writes nothing.
func checkpoint(tx *wtx, p *store.CheckpointParams, errText any) (*store.CheckpointResult, error) {
	l := p.Lease
	if len(p.NoEvents) > 0 {
		if err := checkNoEvents(tx, l.Namespace, l.RunID, p.NoEvents, p.Consume); err != nil {
			if res, rerr := ckReplay(tx, l, p.Seq, p.Fingerprint); rerr == nil {
				return res, nil // a retry: the events it guards against came after it
			}
			return nil, err
		}
	}
	var plan *store.RetryPlan
	if p.Status == store.StatusFailed {
		var err error
		if plan, err = planRetry(tx, p); err != nil { // see wfretry.go
			return nil, err
		}
		if plan != nil { // the run is retried: the checkpoint is written as a wait
			p, errText = plan.Checkpoint, nil
		}
	}
	ck, err := setCheckpointStatus(tx, p, errText)
	if errors.Is(err, sql.ErrNoRows) {
		return ckReplay(tx, l, p.Seq, p.Fingerprint)
	}
	if err != nil {
		return nil, fmt.Errorf("updating run: %w", err)
	}
	if err := writeHistory(tx, ck.seq, p); err != nil {
		return nil, err
	}
	if plan != nil {
		if err := recordRetry(tx, plan, ck.seq); err != nil {
			return nil, err
		}
	}
	if err := shared.StreamInsert(tx, ck.seq, ck.streamSeq, l.Namespace, l.RunID, p.Stream); err != nil {
		return nil, err
	}
	res, err := checkpointed(tx, ck, p)
	if plan != nil {
		res = plan.Result(res)
	}
	return res, err
}

// checkpointed finishes a checkpoint whose run tx updated (ck) and whose
// history it wrote: it applies the checkpoint's events, children and
// approvals, counts an ended child in its group, publishes the run's topics,
// and returns the result.
func checkpointed(tx *wtx, ck ckRow, p *store.CheckpointParams) (*store.CheckpointResult, error) {
	if err := writeWaiting(tx, ck, p); err != nil {
		return nil, err
	}
	l := p.Lease
	if p.Status != store.StatusRunning {
		tx.publish(store.RunTopic(l.Namespace, l.RunID))
	}
	if p.Status == store.StatusPending || p.Status == store.StatusWaiting {
		tx.publish(store.TopicReady)
	}
	at := fromNS(sql.NullInt64{Int64: tx.now.UnixNano(), Valid: true})
	return &store.CheckpointResult{CancelRequested: ck.cancel, At: at}, nil
}

// ckReplay answers a lease write (of seq and fingerprint fp) whose fenced update
// matched no row: a retry of a write the lease applied already gets the answer
// of an applied write (or ErrIdempotencyKeyConflict), anything else
// ErrLeaseLost.
func ckReplay(tx *wtx, l store.Lease, seq, fp int64) (*store.CheckpointResult, error) {
	lost := fmt.Errorf("%w: run %q token %d", store.ErrLeaseLost, l.RunID, l.Token)
	if seq == 0 {
		return nil, lost
	}
	var (
		token, last, lastFP int64
		cancel              bool
		updated             sql.NullInt64
	)
	err := tx.queryRow(sqlCkReplay, l.Namespace, l.RunID).Scan(&token, &last, &lastFP, &cancel, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, lost
	}
	if err != nil {
		return nil, err
	}
	res, err := sqlstore.LeaseReplay(l, seq, fp, token, last, lastFP)
	if err != nil || res == nil {
		return nil, err
	}
	res.CancelRequested, res.At = cancel, fromNS(updated)
	return res, nil
}

// writeWaiting applies a checkpoint's events, children and approvals, and counts
// a finished child in its group. Each part runs only when the checkpoint uses it.
func writeWaiting(tx *wtx, ck ckRow, p *store.CheckpointParams) error {
	if len(p.Consume) > 0 {
		if err := consumeEvents(tx, ck.seq, p.Consume); err != nil {
			return err
		}
	}
	if len(p.Approvals) > 0 {
		if err := createApprovals(tx, p.Lease.Namespace, ck.seq, p.Approvals); err != nil {
			return err
		}
	}
	if len(p.ExpireApprovals) > 0 {
		if err := expireApprovals(tx, ck.seq, p.ExpireApprovals); err != nil {
			return err
		}
	}
	if len(p.Children) > 0 {
		parent := parentRef{Seq: ck.seq, Namespace: p.Lease.Namespace, ID: p.Lease.RunID}
		if err := createChildren(tx, parent, p.Children); err != nil {
			return err
		}
	}
	if p.Status == store.StatusWaiting && len(p.WaitEvents) > 0 {
		// An event it waits for is already in the inbox: due now instead.
		if _, err := tx.exec(sqlWakeIfInbox, tx.now.UnixNano(), ck.seq); err != nil {
			return fmt.Errorf("reading inbox: %w", err)
		}
	}
	if p.Status.Terminal() && ck.parentSeq.Valid {
		return childEnded(tx, ck.parentSeq.Int64, int(ck.position.Int64), p.Status, false)
	}
	if ck.cancel && !p.Status.Terminal() {
		return shared.CancelAfterCheckpoint(tx, ck.seq, p)
	}
	return nil
}

// writeHistory saves a checkpoint's ops, attempts and run-store writes.
func writeHistory(tx *wtx, seq int64, p *store.CheckpointParams) error {
	for _, op := range p.Ops {
		e, err := errJSON(op.Error)
		if err != nil {
			return err
		}
		if _, err := tx.exec(sqlOpUpsert, seq, op.Position, string(op.Kind), op.Name,
			boolInt(op.Done), blob(op.Result), e, op.Attempts, ns(op.StartedAt),
			nsPtr(op.FinishedAt)); err != nil {
			return fmt.Errorf("saving op %d: %w", op.Position, err)
		}
	}
	for _, a := range p.AttemptRows() {
		e, err := errJSON(&a.Error)
		if err != nil {
			return err
		}
		if _, err := tx.exec(sqlAttemptUpsert, seq, a.Position, a.Attempt, e,
			ns(a.StartedAt), ns(a.FinishedAt), a.Outcome); err != nil {
			return fmt.Errorf("saving attempt %d of op %d: %w", a.Attempt, a.Position, err)
		}
	}
	for _, kv := range p.KV {
		var err error
		if kv.Delete {
			_, err = tx.exec(sqlKVDelete, seq, kv.Key)
		} else {
			_, err = tx.exec(sqlKVSet, seq, kv.Key, nonNilBlob(kv.Value))
		}
		if err != nil {
			return fmt.Errorf("writing key %q: %w", kv.Key, err)
		}
	}
	return nil
}

// setCheckpointStatus moves the run to the checkpoint's status if the lease is
// current. It returns sql.ErrNoRows when the lease is not current.
func setCheckpointStatus(tx *wtx, p *store.CheckpointParams, errText any) (ck ckRow, err error) {
	l := p.Lease
	fence := []any{tx.now.UnixNano(), l.Namespace, l.RunID, l.Token, p.Seq, p.Fingerprint}
	dest := []any{&ck.seq, &ck.cancel, &ck.streamSeq}
	n := len(p.Stream) // each status update takes the sequences of the checkpoint's stream events
	var (
		query string
		args  []any
	)
	switch p.Status {
	case store.StatusRunning:
		if n > 0 || p.Seq > 0 {
			query, args = sqlCkRunningStream, append(fence, n)
		} else {
			query, args = sqlCkRunning, fence[:5]
		}
	case store.StatusWaiting:
		var events any
		if len(p.WaitEvents) > 0 {
			list, err := jsonList(p.WaitEvents)
			if err != nil {
				return ck, err
			}
			events = list
		}
		query, args = sqlCkWaiting, append(fence, nsPtr(p.WakeAt), p.WaitReason, events, n)
	case store.StatusBlocked:
		reason := p.WaitReason
		if reason == "" && p.Error != nil {
			reason = p.Error.Message
		}
		query, args = sqlCkBlocked, append(fence, errText, reason, n)
	case store.StatusPending:
		query, args = sqlCkPending, append(fence, n)
	default: // terminal
		query, args = sqlCkFinished, append(fence, string(p.Status), blob(p.Output), errText, n)
		dest = append(dest, &ck.parentSeq, &ck.position)
	}
	if l.RunSeq > 0 {
		err = tx.queryRow(ckBySeq(query, len(args)), append(args, l.RunSeq)...).Scan(dest...)
		if !errors.Is(err, sql.ErrNoRows) {
			return ck, err
		}
		// Matched no row (and changed none): a stale lease, a retry, or a
		// wrong hint; the run found by its ID tells which.
	}
	return ck, tx.queryRow(query, args...).Scan(dest...)
}

// ckBySeqSQL caches ckBySeq's statements by the statement each was made from.
var ckBySeqSQL sync.Map

// ckBySeq returns the run state change query, of args parameters, that finds
// the run by its sequence (the lease's RunSeq, the parameter after them) before
// it checks its namespace and ID: one lookup in the table, where the run's ID
// took one in runs_namespace_id first (a sixth of a step checkpoint's time in
// embedded w1, 1 Dec 2026). A wrong hint matches no row and changes none;
// setCheckpointStatus then looks the run up by its ID.
func ckBySeq(query string, args int) string {
	if q, ok := ckBySeqSQL.Load(query); ok {
		return q.(string)
	}
	q := strings.Replace(query, ckWhere, " WHERE sequence = ?"+strconv.Itoa(args+1)+" AND"+strings.TrimPrefix(ckWhere, " WHERE"), 1)
	ckBySeqSQL.Store(query, q)
	return q
}
