package storepg

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-dev/trellis/internal/batch"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// Group commit for the final checkpoints of child runs. Such a checkpoint counts
// the child in its group's row of child_groups, in the transaction that ends the
// child; that row's lock is held until the commit (an fsync), so children of one
// group that end one transaction each end one at a time (~500 a second). The
// ender instead collects the child-final checkpoints waiting at the same time and
// ends them in one transaction: one merged fenced update for all of them (the
// writer's sqlCheckpoints, without its parent_seq IS NULL guard), then, per group
// and in (parent_seq, position) order, one counter update for all its children of
// the batch, then the release of held children, FailFast and the group's event
// exactly as for a single child (childEnded). The contract is unchanged: each
// child is counted in the transaction that ends it, the row's lock still
// serialises the accounting of a group, and the ended flag it guards still lets
// one transaction only send the group's event. A batch counts its children of a
// group as if they had ended one after the other, the failures last.
//
// A checkpoint whose lease is stale matches no row and fails alone with
// ErrLeaseLost. A batch whose statement fails (other than by a deadlock, which
// inTx retries) is committed again one checkpoint per transaction, so only the
// faulty one fails; after a lost connection (retried by inTx for a while) every
// checkpoint of the batch fails.

// sqlChildEnds is sqlCheckpoints for final checkpoints of children: it ends
// children too, and returns each matched run's place in its parent's group.
var sqlChildEnds = strings.NewReplacer(
	`AND (r.parent_seq IS NULL OR c.status NOT IN ('succeeded', 'failed', 'cancelled'))`, ``,
	sqlCkLockSkipsChildEnds, ``,
	`RETURNING c.i, r.sequence, r.cancel_requested,`, `RETURNING c.i, r.sequence, r.cancel_requested, r.parent_seq, r.parent_position,`,
	`SELECT i, cancel_requested FROM f`, `SELECT i, cancel_requested, parent_seq, parent_position FROM f`,
).Replace(sqlCheckpoints)

// endReq is a child-final checkpoint waiting for an ender.
type endReq struct {
	ctx  context.Context
	ck   *ckReq
	done chan error // buffered
}

// ender commits batches of endReqs, like writer does for other writes, but with one
// goroutine per store: a second would only wait for the first on the same group
// rows (Map10000 ran no faster with two). Batches lock their children's parents
// and groups before the children (lockFamilies).
type ender struct {
	s        *Store
	reqs     chan *endReq
	quit     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

func startEnder(s *Store) *ender {
	e := &ender{s: s, reqs: make(chan *endReq), quit: make(chan struct{})}
	e.wg.Go(e.run)
	return e
}

// stop ends the ender after its current batch.
func (e *ender) stop() {
	e.stopOnce.Do(func() { close(e.quit) })
	e.wg.Wait()
}

func (e *ender) run() { batch.Run(e.reqs, e.quit, e.s.cfg.MaxBatch, e.commit) }

// commit ends a batch in one transaction and answers each request; ck.res nil
// means its lease was stale.
func (e *ender) commit(batch []*endReq) {
	live := batch[:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.done <- err
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	cks := make([]*ckReq, len(live))
	for i, r := range live {
		cks[i] = r.ck
	}
	err := e.s.inTx(context.Background(), func(tx *wtx) error { return endChildren(tx, cks) })
	var pe *pgconn.PgError
	if len(live) > 1 && errors.As(err, &pe) && !isRetryable(err) && !connRetryable(err) {
		// A statement failed: one checkpoint may be to blame. (After a lost
		// connection, inTx has retried already; another try each would only wait.)
		for _, r := range live {
			e.commit([]*endReq{r})
		}
		return
	}
	for _, r := range live {
		r.done <- err
	}
}

// checkpointChildEnd ends a child through the ender: ck went through the writer
// and matched no row, so it is a child's final checkpoint or its lease is stale.
func (s *Store) checkpointChildEnd(ctx context.Context, ck *ckReq) (*store.CheckpointResult, error) {
	r := &endReq{ctx: ctx, ck: ck, done: make(chan error, 1)}
	select {
	case s.e.reqs <- r:
	case <-s.e.quit:
		return nil, fmt.Errorf("checkpointing: %w", store.ErrClosed)
	case <-ctx.Done():
		return nil, fmt.Errorf("checkpointing: %w", ctx.Err())
	}
	select {
	case err := <-r.done:
		if err != nil {
			return nil, fmt.Errorf("checkpointing: %w", err)
		}
	case <-ctx.Done():
		return nil, fmt.Errorf("checkpointing: %w", ctx.Err())
	}
	if ck.res == nil {
		l := ck.p.Lease
		return nil, fmt.Errorf("checkpointing: %w: run %q token %d", store.ErrLeaseLost, l.RunID, l.Token)
	}
	return ck.res, nil
}

// groupKey identifies a child group.
type groupKey struct {
	parentSeq int64
	position  int
}

// groupDelta is what a transaction changes in a group's counters.
type groupDelta = sqlstore.GroupDelta

// endChildren writes the final checkpoints cks and counts the children among them
// in their groups. It sets each ck.res (nil: stale lease); it may run again after
// a deadlock, so it keeps nothing else across calls.
func endChildren(tx *wtx, cks []*ckReq) error {
	if err := lockFamiliesOf(tx, cks); err != nil {
		return err
	}
	deltas := make(map[groupKey]*groupDelta)
	for rest := cks; len(rest) > 0; {
		var cur []*ckReq
		cur, rest = distinctRuns(rest)
		if err := endBatch(tx, cur, deltas); err != nil {
			return err
		}
	}
	keys := make([]groupKey, 0, len(deltas))
	for k := range deltas {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b groupKey) int {
		return cmp.Or(cmp.Compare(a.parentSeq, b.parentSeq), cmp.Compare(a.position, b.position))
	})
	for _, k := range keys {
		if err := countEnded(tx, k.parentSeq, k.position, *deltas[k]); err != nil {
			return err
		}
	}
	return nil
}

// familyLocks returns the two statements of lockFamilies for the runs whose
// sequences runs (a query) selects: the first locks their parents in sequence
// order, the second their groups in (parent_seq, position) order. Nothing is
// locked for a run that is no child.
func familyLocks(runs string) [2]string {
	return [2]string{
		`SELECT 1 FROM runs WHERE sequence IN (SELECT parent_seq FROM runs WHERE sequence IN (` + runs + `))
	ORDER BY sequence FOR UPDATE`,
		`SELECT 1 FROM child_groups WHERE (parent_seq, position) IN (SELECT parent_seq, parent_position
		FROM runs WHERE sequence IN (` + runs + `))
	ORDER BY parent_seq, position FOR UPDATE`,
	}
}

var (
	// sqlLockFamiliesOfLeases: the runs of leases ($1 namespaces, $2 IDs).
	sqlLockFamiliesOfLeases = familyLocks(`SELECT r.sequence FROM runs r
		JOIN unnest($1::text[], $2::text[]) AS x(ns, id) ON r.namespace = x.ns AND r.id = x.id`)
	// sqlLockFamilyOfRef: the run a Ref ($2) names in namespace $1.
	sqlLockFamilyOfRef = familyLocks(`SELECT ` + refSeq)
)

// lockFamilies locks the parents of some runs, then their child groups (the
// statements of familyLocks, sent in one round trip), before the caller locks
// the runs themselves. That is the order of the family's lock hierarchy, a parent
// before its groups, a group before its children, which every transaction that
// waits for more than one of those rows keeps: a child's end needs its group to
// count it, its unfinished siblings when it fails a FailFast group, and its parent
// to tell it the group ended; a cancellation takes the run (after its parent and
// group, here), then its children in sequence order, as a batch of checkpoints
// locks runs. Without it, transactions that took the rows in other orders
// deadlocked, each broken by Postgres after deadlock_timeout (1 s) by failing one
// transaction, which was retried (TestChildEndsFailFastLockOrder,
// TestCancelParentWhileGroupFails, TestCancelChildrenWhileGroupFails). A run's
// parent and group never change, so those read here are the ones the caller
// counts it in.
func lockFamilies(tx *wtx, stmts [2]string, args ...any) error {
	b := &pgx.Batch{}
	for _, q := range stmts {
		b.Queue(q, args...)
	}
	if err := tx.SendBatch(tx.ctx, b).Close(); err != nil {
		return fmt.Errorf("locking parent runs and child groups: %w", err)
	}
	return nil
}

// lockFamiliesOf is lockFamilies for the runs of checkpoints.
func lockFamiliesOf(tx *wtx, cks []*ckReq) error {
	ns, ids := make([]string, len(cks)), make([]string, len(cks))
	for i, ck := range cks {
		ns[i], ids[i] = ck.p.Lease.Namespace, ck.p.Lease.RunID
	}
	return lockFamilies(tx, sqlLockFamiliesOfLeases, ns, ids)
}

// distinctRuns splits cks into the first checkpoint of each run and the others
// (one statement may not update a row twice).
func distinctRuns(cks []*ckReq) (first, rest []*ckReq) {
	seen := make(map[store.Lease]bool, len(cks))
	for _, ck := range cks {
		run := store.Lease{Namespace: ck.p.Lease.Namespace, RunID: ck.p.Lease.RunID}
		if seen[run] {
			rest = append(rest, ck)
			continue
		}
		seen[run] = true
		first = append(first, ck)
	}
	return first, rest
}

// endBatch runs the merged fenced update of cks (distinct runs) and adds the
// children it ended to deltas.
func endBatch(tx *wtx, cks []*ckReq, deltas map[groupKey]*groupDelta) error {
	var c ckColumns
	for _, ck := range cks {
		ck.res = nil
		c.add(ck)
	}
	rows, err := tx.query(sqlChildEnds, c.args()...)
	if err != nil {
		return fmt.Errorf("ending child runs: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			i         int64
			cancel    bool
			parentSeq *int64
			position  *int32
		)
		if err := rows.Scan(&i, &cancel, &parentSeq, &position); err != nil {
			return fmt.Errorf("ending child runs: %w", err)
		}
		ck := cks[i-1]
		ck.res = &store.CheckpointResult{CancelRequested: cancel, At: ck.now.Truncate(time.Microsecond)}
		tx.publish(store.RunTopic(ck.p.Lease.Namespace, ck.p.Lease.RunID))
		if len(ck.p.Stream) > 0 {
			tx.publish(store.StreamTopic(ck.p.Lease.Namespace, ck.p.Lease.RunID))
		}
		if parentSeq == nil {
			continue
		}
		k := groupKey{parentSeq: *parentSeq, position: int(*position)}
		if deltas[k] == nil {
			deltas[k] = &groupDelta{}
		}
		deltas[k].Count(ck.p.Status)
		deltas[k].Active++
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("ending child runs: %w", err)
	}
	return nil
}
