package sqlstore

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/trellis-dev/trellis/store"
)

// RunOwned lists the tables whose rows belong to a run, each with the column
// that holds the run's sequence: RunDelete and RunsPurge delete their rows with
// the run's. A table added for runs (stream events, say) is added here, and
// then a run's deletion takes its rows along; every entry needs an index that
// starts with its column.
var RunOwned = []struct{ Table, Column string }{
	{"ops", "run_seq"},
	{"attempts", "run_seq"},
	{"kv", "run_seq"},
	{"events", "run_seq"},
	{"approvals", "run_seq"},
	{"child_groups", "parent_seq"},
	{"idempotency_keys", "run_seq"},
	{"stream_events", "run_seq"},
}

// RunDelete deletes the finished run a Ref names, with its rows, and returns it
// as it was.
func (s *SQL) RunDelete(tx Tx, p *store.RunDeleteParams) (*store.Run, error) {
	query := s.d.rebind(`SELECT ` + RunCols + ` FROM runs WHERE sequence = ` + RefSeq + s.d.Lock())
	run, _, err := ScanRun(tx.QueryRow(query, p.Namespace, p.Ref))
	if errors.Is(err, ErrNoRows) {
		return nil, store.RunNotFound(p.Namespace, p.Ref)
	}
	if err != nil {
		return nil, err
	}
	if !run.Status.Terminal() {
		return nil, fmt.Errorf("%w: run %s is %s; cancel it first", store.ErrRunActive, run.ID, run.Status)
	}
	if err := s.deleteRuns(tx, seqList([]int64{run.Sequence})); err != nil {
		return nil, err
	}
	tx.Publish(store.RunTopic(run.Namespace, run.ID))
	return run, nil
}

// PurgeFind finds up to p.Limit runs of p.Namespace that finished before
// p.FinishedBefore, each finished status oldest first (in order of creation),
// for PurgeDelete. It reads outside the write (Methods.runsPurge reads it
// on the read pool), so that SQLite's writer is not held while it reads.
//
// No index of its own finds them (an entry in one for every run that ends
// costs each run more than the purge saves, docs/retention.md): it walks each
// finished status's part of runs_status from the oldest run, a page at a time,
// and stops at the first run created at or after the cutoff, which cannot have
// finished before it. What it reads beyond the expired runs it deletes is the
// runs created before the cutoff that finished after it, the runs that took
// longer than their time since. (A server whose clock runs ahead stamps its
// runs late: the walk may stop at one of them and leave the expired runs
// after it for a later pass, by as much as that clock ran ahead.)
func (s *SQL) PurgeFind(q Querier, p *store.RunsPurgeParams) ([]int64, error) {
	cutoff := s.d.Time(p.FinishedBefore)
	var seqs []int64
	for _, walk := range s.q.purgeWalks {
		after, done := int64(0), false
		for !done && len(seqs) < p.Limit {
			read := 0
			err := q.Query(walk, []any{p.Namespace, cutoff, after, purgePage}, func(row Scanner) error {
				var seq int64
				var mark int
				if err := row.Scan(&seq, &mark); err != nil {
					return err
				}
				read++
				after = seq
				switch {
				case done || len(seqs) == p.Limit:
				case mark == purgeExpired:
					seqs = append(seqs, seq)
				case mark == purgeNewer:
					done = true
				} // else created before the cutoff, finished after it: go on
				return nil
			})
			if err != nil {
				return nil, fmt.Errorf("selecting expired runs: %w", err)
			}
			done = done || read < purgePage
		}
	}
	return seqs, nil
}

// PurgeDelete deletes the runs PurgeFind found that are still there and
// still expired, and returns how many it deleted. Another process may be
// purging the same runs: on Postgres it locks them first (and Postgres checks
// the condition again on a row changed while it waited for the lock, and
// skips a row deleted meanwhile); SQLite's single writer needs no lock.
func (s *SQL) PurgeDelete(tx Tx, p *store.RunsPurgeParams, found []int64) (int, error) {
	if len(found) == 0 {
		return 0, nil
	}
	var seqs []int64
	query := s.d.rebind(`SELECT sequence FROM runs WHERE sequence IN ` + seqList(found) + ` AND finished_at < $1` + s.d.Lock())
	err := tx.Query(query, []any{s.d.Time(p.FinishedBefore)}, func(row Scanner) error {
		var seq int64
		if err := row.Scan(&seq); err != nil {
			return err
		}
		seqs = append(seqs, seq)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("locking expired runs: %w", err)
	}
	if len(seqs) == 0 {
		return 0, nil
	}
	return len(seqs), s.deleteRuns(tx, seqList(seqs))
}

// The purge's walk reads purgePage runs at a time, each marked by how it
// stands against the cutoff (purgeWalks' CASE): 1 finished before it, 2
// created at or after it, 0 neither.
const (
	purgePage    = 500
	purgeExpired = 1
	purgeNewer   = 2
)

// purgeWalks are the purge's walks, one for each finished status: the part of
// runs_status that holds it (naming the index's condition, as a query by
// status does: Dialect.RunningApart), in sequence order, after $3, each run
// marked against the cutoff $2.
func purgeWalks(d *Dialect) []string {
	var out []string
	for _, st := range []store.Status{store.StatusSucceeded, store.StatusFailed, store.StatusCancelled} {
		out = append(out, d.rebind(`SELECT sequence, CASE WHEN finished_at < $2 THEN 1 WHEN created_at < $2 THEN 0 ELSE 2 END
	FROM runs WHERE namespace = $1 AND status = '`+string(st)+`' AND status <> 'running' AND sequence > $3
	ORDER BY sequence LIMIT $4`))
	}
	return out
}

// PurgeWalks returns the purge's walks (purgeWalks), for the tests of their
// plans: $1 namespace, $2 cutoff, $3 after, $4 page.
func (s *SQL) PurgeWalks() []string { return s.q.purgeWalks }

// seqList renders run sequences as an SQL list, "(1,2,3)": integers only,
// nothing to quote.
func seqList(seqs []int64) string {
	var b strings.Builder
	b.WriteByte('(')
	for i, seq := range seqs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(seq, 10))
	}
	b.WriteByte(')')
	return b.String()
}

// deleteRuns deletes the runs of a seqList with every row that belongs to them; the
// children of a deleted parent stay, no longer tied to it.
func (s *SQL) deleteRuns(tx Tx, list string) error {
	if _, err := tx.Exec(`UPDATE runs SET parent_seq = NULL, parent_position = NULL, item = NULL
	WHERE parent_seq IN ` + list); err != nil {
		return fmt.Errorf("detaching children: %w", err)
	}
	if err := s.deleteRunBlobs(tx, list); err != nil {
		return err
	}
	for _, o := range RunOwned {
		if _, err := tx.Exec(`DELETE FROM ` + o.Table + ` WHERE ` + o.Column + ` IN ` + list); err != nil {
			return fmt.Errorf("deleting %s: %w", o.Table, err)
		}
	}
	if _, err := tx.Exec(`DELETE FROM runs WHERE sequence IN ` + list); err != nil {
		return fmt.Errorf("deleting runs: %w", err)
	}
	return nil
}

// RunNamespaces lists the namespaces that have runs, skipping from one to the
// next along the index on (namespace, ...) rather than reading every run.
func (s *SQL) RunNamespaces(q Querier) ([]string, error) {
	return namespacesOf(q, "runs")
}

// namespacesOf lists the distinct namespaces of table, skipping from one to
// the next along its index on (namespace, ...).
func namespacesOf(q Querier, table string) ([]string, error) {
	var out []string
	err := q.Query(`WITH RECURSIVE ns(n) AS (
		SELECT MIN(namespace) FROM `+table+`
		UNION ALL SELECT (SELECT MIN(namespace) FROM `+table+` WHERE namespace > ns.n) FROM ns WHERE ns.n IS NOT NULL
	) SELECT n FROM ns WHERE n IS NOT NULL`, nil, func(row Scanner) error {
		var n string
		if err := row.Scan(&n); err != nil {
			return err
		}
		out = append(out, n)
		return nil
	})
	return out, err
}

// RunSeqOf is the run sequence an idempotency key's result names (a created
// run, a cancelled or resumed one), recorded with the key so that deleting the
// run deletes it too; nil when the result names no run.
func RunSeqOf(result any) any {
	switch r := result.(type) {
	case *store.RunCreateResult:
		if r != nil && r.Run != nil {
			return r.Run.Sequence
		}
	case *store.Run:
		if r != nil {
			return r.Sequence
		}
	}
	return nil
}
