package sqlstore

import (
	"database/sql"
	"errors"
	"fmt"
	"slices"

	"github.com/trellis-dev/trellis/store"
)

// RefSeq is the sequence of the run a Ref ($2) names in namespace $1: the run with
// that ID, else the latest run with that workflow ID. NULL when none matches.
// The second lookup needs only the runs started with a workflow ID (workflow_id
// <> id, all that Postgres' runs_workflow_id holds): no run has the ID, so none
// started without one has it as workflow ID.
const RefSeq = `COALESCE(
	(SELECT sequence FROM runs WHERE namespace = $1 AND id = $2),
	(SELECT MAX(sequence) FROM runs WHERE namespace = $1 AND workflow_id = $2 AND workflow_id <> id))`

// RunByRef resolves a Ref ($1 namespace, $2 ref) to its run, or
// store.ErrRunNotFound. A run ID is looked up first, then a workflow ID: two
// statements rather than one with RefSeq, because Postgres plans each
// execution (plan_cache_mode) and RefSeq's plan costs it about five times a
// lookup by ID, the common case.
func (s *SQL) RunByRef(q Querier, namespace, ref string) (*store.Run, error) {
	r, _, err := ScanRun(q.QueryRow(s.q.runByID, namespace, ref))
	if errors.Is(err, ErrNoRows) {
		r, _, err = ScanRun(q.QueryRow(s.q.runByWorkflowID, namespace, ref))
	}
	if errors.Is(err, ErrNoRows) {
		return nil, store.RunNotFound(namespace, ref)
	}
	return r, err
}

// Runs runs a query of RunCols and returns every row.
func Runs(q Querier, query string, args ...any) ([]*store.Run, error) {
	runs := []*store.Run{}
	err := q.Query(query, args, func(row Scanner) error {
		r, _, err := ScanRun(row)
		if err == nil {
			runs = append(runs, r)
		}
		return err
	})
	return runs, err
}

// KVGet reads a key of a run's key-value store.
func (s *SQL) KVGet(q Querier, p *store.KVGetParams) ([]byte, error) {
	var (
		seq   sql.NullInt64
		value []byte
		found sql.NullBool
	)
	if err := q.QueryRow(s.q.kvGet, p.Namespace, p.Ref, p.Key).Scan(&seq, &value, &found); err != nil {
		return nil, err
	}
	switch {
	case !seq.Valid:
		return nil, store.RunNotFound(p.Namespace, p.Ref)
	case !found.Bool:
		return nil, fmt.Errorf("key %q: %w", p.Key, store.ErrKeyNotFound)
	}
	if value == nil {
		value = []byte{} // a key set to nothing still exists
	}
	return value, nil
}

// RunList reads one page of runs.
func (s *SQL) RunList(q Querier, p *store.RunListParams) (*store.RunListResult, error) {
	query, args, limit, err := s.RunListQuery(p)
	if err != nil {
		return nil, err
	}
	runs, err := Runs(q, query, args...)
	if err != nil {
		return nil, err
	}
	res := &store.RunListResult{}
	res.Runs, res.NextCursor = store.Page(runs, limit, func(r *store.Run) int64 { return r.Sequence })
	return res, nil
}

// RunListQuery builds the query of one page: the SQL, its arguments and the
// page size.
func (s *SQL) RunListQuery(p *store.RunListParams) (string, []any, int, error) {
	l, err := s.newList(p.Limit)
	if err != nil {
		return "", nil, 0, err
	}
	ns := l.arg(p.Namespace)
	l.cond("namespace = " + ns)
	from := `SELECT ` + RunCols + ` FROM runs`
	sts := make([]string, len(p.Statuses))
	for i, st := range p.Statuses {
		if !st.Valid() {
			return "", nil, 0, fmt.Errorf("%w: Statuses: unknown status %q", store.ErrInvalidParams, st)
		}
		sts[i] = string(st)
	}
	// A list by workflow ID reads its index, which finds the few runs to
	// filter. Else, with RunningApart, each status asked for is read through
	// its index: a list IN several statuses would walk runs_list (SQLite's),
	// every run of the namespace, looking for them; with ListsByStatus
	// (Postgres, which has no runs_list), each status asked for, or every
	// status.
	if len(sts) == 0 && s.d.ListsByStatus && p.WorkflowID == "" {
		for _, st := range store.AllStatuses {
			sts = append(sts, string(st))
		}
	}
	switch {
	case len(sts) == 0:
	case (s.d.RunningApart || s.d.ListsByStatus) && p.WorkflowID == "":
		slices.Sort(sts)
		for _, st := range slices.Compact(sts) {
			alt := s.statusPart(l, RunCols, ns, st)
			// Postgres: an active status's part of runs_status holds an
			// entry for every run that passed through it since the last
			// vacuum; the finished runs' parts bound what it reads.
			alt.late = s.d.ListsByStatus && !store.Status(st).Terminal()
			l.alts = append(l.alts, alt)
		}
	default:
		if err := l.in("status", sts); err != nil {
			return "", nil, 0, err
		}
	}
	if p.WorkflowID != "" {
		l.cond(s.d.WorkflowIDIs(ns, l.arg(p.WorkflowID)))
	}
	l.runFilters(p.Workflow, p.Queue, p.CreatedAfter, p.CreatedBefore)
	if err := l.after("sequence", p.Cursor); err != nil {
		return "", nil, 0, err
	}
	query, args := l.build(from, "sequence")
	return query, args, l.limit, nil
}

// statusPart is how a list or a count (a SELECT of cols) reads the runs of
// status st in the namespace whose marker is ns. With Dialect.RunningApart it
// reads them through the index that holds them, naming that partial index's
// condition, as SQLite needs to read it: runs_status, newest first, or for
// running runs, as many as the workers' slots, runs_running
// (Dialect.RunningRuns). Else by status alone.
func (s *SQL) statusPart(l *listQuery, cols, ns, st string) listAlt {
	from := `SELECT ` + cols + ` FROM runs`
	switch {
	case !s.d.RunningApart:
		return listAlt{from: from, cond: "status = " + l.arg(st)}
	case st == string(store.StatusRunning):
		alt := listAlt{from: `SELECT ` + cols + ` FROM ` + s.d.RunningRuns(ns), cond: "status = 'running'"}
		if s.d.ListsByStatus {
			// Read late above a page of the other statuses (Postgres), the
			// running runs are found in that range of sequences, which the
			// planner reads as it likes: reading them all through
			// runs_running walks its dead entries too, every run that
			// passed through running since the last vacuum (after 200,000
			// runs ended, a first page took 36-54 ms this way, 2-5 the
			// other).
			alt.boundedFrom = from
		}
		return alt
	}
	return listAlt{from: from, cond: "status = " + l.arg(st) + " AND status <> 'running'"}
}

// RunChildren lists the children of a parent's group in item order.
func (s *SQL) RunChildren(q Querier, p *store.RunChildrenParams) ([]*store.Run, error) {
	runs, err := Runs(q, s.q.runChildren, p.Namespace, p.Parent, p.Position)
	if err != nil || len(runs) > 0 {
		return runs, err
	}
	// Tell an unknown parent from a parent without that group.
	if _, err := s.RunByRef(q, p.Namespace, p.Parent); err != nil {
		return nil, err
	}
	return runs, nil
}
