package sqlstore

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// batchCols are the columns a batch insert writes; the rest take their defaults
// (no attempts, no lease, no output). A batch with runs created claimed writes
// leaseCols too.
const (
	batchCols = `namespace, id, workflow_id, workflow, queue, priority, status, version,
	input, deadline, available_at, created_at, updated_at, concurrency_key, trace_parent, pin_version, retry`
	leaseCols = `, attempts, lease_owner, lease_token, lease_expires_at, started_at`
)

// RunsCreate creates the runs of p (validated) in tx: each item's reuse policy
// is applied against the store and the batch's earlier items, then one
// multi-row INSERT ... ON CONFLICT DO NOTHING writes every run left; a row the
// insert skipped (a run that another transaction created meanwhile) is
// reported as the conflict it met. An item with a Claim that is due now, in a
// queue that does not limit claims, is created running, leased to the claim's
// worker (its item's Claimed), as RunCreate does.
func (s *SQL) RunsCreate(tx Tx, p *store.RunsCreateParams) (*store.RunsCreateResult, error) {
	items := make([]store.RunsCreateItem, len(p.Runs))
	latest, err := s.latestByWorkflowID(tx, p)
	if err != nil {
		return nil, err
	}
	restricted, err := s.restrictedQueues(tx, p)
	if err != nil {
		return nil, err
	}
	now := tx.Now()
	ready := false                                      // a run is created pending: a claim may take it
	inBatch := make(map[string]*store.Run, len(p.Runs)) // workflow ID -> run created by an earlier item
	var insert []int                                    // indexes of the items to insert
	for i, r := range p.Runs {
		prev := inBatch[r.WorkflowID]
		if prev == nil {
			prev = latest[r.WorkflowID]
		}
		switch {
		case prev != nil && r.Reuse == store.ReuseReturnExisting:
			items[i] = store.RunsCreateItem{Run: prev}
			continue
		case prev != nil && (r.Reuse == store.ReuseReject || !prev.Status.Terminal()):
			items[i].Err = store.WorkflowIDTakenError(r.WorkflowID, prev.ID, r.Reuse)
			continue
		}
		run := r.NewRun(now, nil)
		run.Input = slices.Clone(r.Input)
		items[i] = store.RunsCreateItem{Run: run, Created: true}
		if c := r.Claim; c != nil && !run.AvailableAt.After(now) && !restricted[r.Queue] {
			items[i].Claimed = c.Apply(run, now)
		} else {
			ready = true
		}
		inBatch[r.WorkflowID] = run
		insert = append(insert, i)
	}
	if len(insert) > 0 {
		if err := s.insertBatch(tx, p, items, insert); err != nil {
			return nil, err
		}
		if ready {
			tx.Publish(store.TopicReady)
		}
	}
	return &store.RunsCreateResult{Items: items}, nil
}

// restrictedQueues returns, of the queues of the batch's items that ask to be
// created claimed, those that limit claims (their runs wait for an ordinary
// claim, which respects the limits); nil when no item asks.
func (s *SQL) restrictedQueues(tx Tx, p *store.RunsCreateParams) (map[string]bool, error) {
	var names []string
	for _, r := range p.Runs {
		if r.Claim != nil {
			names = append(names, r.Queue)
		}
	}
	if len(names) == 0 {
		return nil, nil
	}
	list, err := s.d.List(slices.Compact(slices.Sorted(slices.Values(names))))
	if err != nil {
		return nil, err
	}
	restricted := map[string]bool{}
	q := `SELECT name FROM queues WHERE namespace = ` + s.d.Param(1) + ` AND ` + s.d.InList("name", s.d.Param(2)) + ` AND ` + Restricted
	err = tx.Query(q, []any{p.Namespace, list}, func(row Scanner) error {
		var name string
		if err := row.Scan(&name); err != nil {
			return err
		}
		restricted[name] = true
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading queue limits: %w", err)
	}
	return restricted, nil
}

// latestByWorkflowID reads, in one query, the latest run of each workflow ID of
// the batch, for the items whose policy looks at finished runs too.
func (s *SQL) latestByWorkflowID(tx Tx, p *store.RunsCreateParams) (map[string]*store.Run, error) {
	var ids []string
	for _, r := range p.Runs {
		ids = append(ids, r.WorkflowID)
	}
	ids = slices.Compact(slices.Sorted(slices.Values(ids)))
	list, err := s.d.List(ids)
	if err != nil {
		return nil, err
	}
	// Active runs are found too: the default policy rejects a start while one is.
	runs, err := Runs(tx, s.d.RunsOfWorkflowIDs, p.Namespace, list)
	if err != nil {
		return nil, fmt.Errorf("reading workflow IDs: %w", err)
	}
	latest := make(map[string]*store.Run, len(runs))
	for _, r := range runs {
		if l := latest[r.WorkflowID]; l == nil || r.Sequence > l.Sequence {
			latest[r.WorkflowID] = r
		}
	}
	return latest, nil
}

// insertBatch inserts the runs of items at the indexes of insert with one
// statement and fills in their sequences; an item whose row was skipped by a
// conflict becomes ErrRunExists.
func (s *SQL) insertBatch(tx Tx, p *store.RunsCreateParams, items []store.RunsCreateItem, insert []int) error {
	claims := false
	for _, i := range insert {
		claims = claims || items[i].Claimed != nil
	}
	var b strings.Builder
	b.WriteString(`INSERT INTO runs (` + batchCols)
	if claims {
		b.WriteString(leaseCols)
	}
	b.WriteString(`) VALUES `)
	a := &args{d: &s.d, next: s.d.Next}
	for k, i := range insert {
		r := items[i].Run
		if k > 0 {
			b.WriteString(", ")
		}
		var deadline any = nil
		if r.Deadline != nil {
			deadline = s.d.Time(*r.Deadline)
		}
		retry, err := store.RetryColumn(r.Retry)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "(%s, %s, %s, %s, %s, %s, '%s', %s, %s, %s, %s, %s, %s, %s, %s, %s, %s",
			a.add(r.Namespace), a.add(r.ID), a.add(r.WorkflowID), a.add(r.Workflow), a.add(r.Queue),
			a.add(r.Priority), r.Status, a.add(r.Version), a.add(Blob(r.Input)), a.add(deadline),
			a.add(s.d.Time(r.AvailableAt)), a.add(s.d.Time(r.CreatedAt)), a.add(s.d.Time(r.UpdatedAt)),
			a.add(p.Runs[i].ConcurrencyKey), a.add(r.TraceParent), a.add(r.PinVersion()), a.add(retry))
		if claims {
			var token int64
			var expires, started time.Time // zero: NULL
			if cr := items[i].Claimed; cr != nil {
				token, expires, started = cr.LeaseToken, cr.LeaseExpiresAt, *r.StartedAt
			}
			fmt.Fprintf(&b, ", %s, %s, %s, %s, %s", a.add(r.Attempts), a.add(r.LeaseOwner), a.add(token),
				a.add(s.d.Time(expires)), a.add(s.d.Time(started)))
		}
		b.WriteString(")")
	}
	b.WriteString(` ON CONFLICT DO NOTHING RETURNING id, sequence`)
	seqs := make(map[string]int64, len(insert))
	err := tx.Query(b.String(), a.list, func(row Scanner) error {
		var (
			id  string
			seq int64
		)
		if err := row.Scan(&id, &seq); err != nil {
			return err
		}
		seqs[id] = seq
		return nil
	})
	if err != nil {
		return fmt.Errorf("inserting runs: %w", err)
	}
	for _, i := range insert {
		r := items[i].Run
		seq, ok := seqs[r.ID]
		if !ok {
			items[i] = store.RunsCreateItem{Err: store.RunExistsError(r.ID, r.WorkflowID, store.ReuseRejectActive)}
			continue
		}
		r.Sequence = seq
	}
	return nil
}
