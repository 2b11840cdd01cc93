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
	if err := s.deleteRuns(tx, []int64{run.Sequence}); err != nil {
		return nil, err
	}
	tx.Publish(store.RunTopic(run.Namespace, run.ID))
	return run, nil
}

// RunsPurge deletes up to p.Limit runs of p.Namespace that finished before
// p.FinishedBefore, oldest first, and returns how many it deleted.
func (s *SQL) RunsPurge(tx Tx, p *store.RunsPurgeParams) (int, error) {
	query := s.d.rebind(`SELECT sequence FROM runs WHERE namespace = $1 AND finished_at < $2
	ORDER BY finished_at LIMIT $3` + s.d.Lock())
	var seqs []int64
	err := tx.Query(query, []any{p.Namespace, s.d.Time(p.FinishedBefore), p.Limit}, func(row Scanner) error {
		var seq int64
		if err := row.Scan(&seq); err != nil {
			return err
		}
		seqs = append(seqs, seq)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("selecting expired runs: %w", err)
	}
	if len(seqs) == 0 {
		return 0, nil
	}
	return len(seqs), s.deleteRuns(tx, seqs)
}

// deleteRuns deletes runs by sequence with every row that belongs to them; the
// children of a deleted parent stay, no longer tied to it.
func (s *SQL) deleteRuns(tx Tx, seqs []int64) error {
	var b strings.Builder
	b.WriteByte('(')
	for i, seq := range seqs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(seq, 10))
	}
	b.WriteByte(')')
	list := b.String() // integers only: nothing to quote
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
