package storesqlite

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// The reads that lean on a partial index of runs read it. SQLite reads a
// partial index only for a query that names its condition, so a query that
// lost that term would walk every run of the namespace instead, and still
// answer right: only its plan tells. Running runs are kept out of runs_status
// (migration 0016) and counted and listed through runs_running; the next due
// time of pending runs reads runs_pending_available, which holds only those not
// due when they became pending.
func TestQueriesReadTheirPartialIndexes(t *testing.T) {
	s := openWithRuns(t, "a")
	count := func(st store.Status) (string, []any) {
		return shared.CountQuery(&store.RunCountsParams{Namespace: "ns"}, st, store.DefaultCountCap)
	}
	list := func(workflowID string, sts ...store.Status) (string, []any) {
		q, args, _, err := shared.RunListQuery(&store.RunListParams{Namespace: "ns", WorkflowID: workflowID, Statuses: sts})
		if err != nil {
			t.Fatal(err)
		}
		return q, args
	}
	type query struct {
		name  string
		build func() (string, []any)
		want  string
	}
	queries := []query{
		{"list by one status", func() (string, []any) { return list("", store.StatusFailed) }, "USING INDEX runs_status (namespace=? AND status=?)"},
		{"list running runs", func() (string, []any) { return list("", store.StatusRunning) }, "USING INDEX runs_running (namespace=?)"},
		{"list by two statuses: one part", func() (string, []any) { return list("", store.StatusRunning, store.StatusWaiting) },
			"USING INDEX runs_running (namespace=?)"},
		{"list by two statuses: the other", func() (string, []any) { return list("", store.StatusRunning, store.StatusWaiting) },
			"USING INDEX runs_status (namespace=? AND status=?)"},
		{"list a workflow ID's runs by status", func() (string, []any) { return list("order-1", store.StatusSucceeded) },
			"USING INDEX runs_workflow_id (namespace=? AND workflow_id=?)"},
		{"next due time", func() (string, []any) {
			return sqlNextDue, []any{"ns", time.Now().UnixNano(), `["w"]`, `[]`}
		}, "USING INDEX runs_pending_available (namespace=? AND available_at>?)"},
	}
	for _, st := range store.AllStatuses {
		want := "USING COVERING INDEX runs_status (namespace=? AND status=?)"
		if st == store.StatusRunning {
			want = "INDEX runs_running (namespace=?)" // covering: the count needs no row
		}
		queries = append(queries, query{"count " + string(st), func() (string, []any) { return count(st) }, want})
	}
	for _, q := range queries {
		sqlText, args := q.build()
		rows, err := s.readDB.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+sqlText, args...)
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		if err := rows.Close(); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(plan, "; "); !strings.Contains(got, q.want) || strings.Contains(got, "runs_list") {
			t.Errorf("%s: plan %q, want it to read %q (and not runs_list)", q.name, got, q.want)
		}
	}
}
