package storesqlite

import (
	"context"
	"errors"
	"regexp"
	"strconv"
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
		// Workflow IDs: runs_workflow_id holds the runs started with one,
		// runs_namespace_id finds the run started without one whose ID it is
		// (migration 0029); a lookup reads both.
		{"list a workflow ID's runs by status", func() (string, []any) { return list("order-1", store.StatusSucceeded) },
			"USING INDEX runs_workflow_id (namespace=? AND workflow_id=?)"},
		{"list a workflow ID's runs by status: its run by ID", func() (string, []any) { return list("order-1", store.StatusSucceeded) },
			"USING INDEX runs_namespace_id (namespace=? AND id=?)"},
		{"list a workflow ID's runs", func() (string, []any) { return list("order-1") },
			"USING INDEX runs_workflow_id (namespace=? AND workflow_id=?)"},
		{"a batch's workflow IDs", func() (string, []any) { return shared.Dialect().RunsOfWorkflowIDs, []any{"ns", `["a"]`} },
			"USING INDEX runs_workflow_id (namespace=? AND workflow_id=?)"},
		{"a batch's workflow IDs: runs by ID", func() (string, []any) { return shared.Dialect().RunsOfWorkflowIDs, []any{"ns", `["a"]`} },
			"USING INDEX runs_namespace_id (namespace=? AND id=?)"},
		{"a reuse policy's latest run", func() (string, []any) { return sqlLatestByWorkflowID, []any{"ns", "a"} },
			"INDEX runs_workflow_id (namespace=? AND workflow_id=?)"},
		{"a reuse policy's latest run: by ID", func() (string, []any) { return sqlLatestByWorkflowID, []any{"ns", "a"} },
			"USING INDEX runs_namespace_id (namespace=? AND id=?)"},
		{"a start's check of runs started without a workflow ID", func() (string, []any) { return sqlImplicitTaken, []any{"ns", "a"} },
			"USING INDEX runs_namespace_id (namespace=? AND id=?)"},
		{"a ref's run by workflow ID", func() (string, []any) { return "SELECT " + refSeq, []any{"ns", "a"} },
			"INDEX runs_workflow_id (namespace=? AND workflow_id=?)"},
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
		got := queryPlan(t, s, sqlText, args...)
		// runs_list may find a run by its sequence, never walk a namespace.
		walks := strings.Contains(got, "runs_list (namespace=?)") || strings.Contains(got, "SCAN runs")
		if !strings.Contains(got, q.want) || walks {
			t.Errorf("%s: plan %q, want it to read %q (and walk neither runs_list nor runs)", q.name, got, q.want)
		}
	}
}

// A checkpoint with the lease's sequence (store.Lease.RunSeq) finds its run by
// rowid, whatever the status it writes; without it, by runs_namespace_id.
func TestCheckpointsFindTheirRunBySequence(t *testing.T) {
	s := openWithRuns(t, "a")
	param := regexp.MustCompile(`\?(\d+)`)
	for name, query := range map[string]string{"running, with stream events": sqlCkRunningStream, "running": sqlCkRunning,
		"waiting": sqlCkWaiting, "blocked": sqlCkBlocked, "pending": sqlCkPending, "finished": sqlCkFinished} {
		n := 0
		for _, m := range param.FindAllStringSubmatch(query, -1) {
			n = max(n, atoi(t, m[1]))
		}
		for _, bySeq := range []bool{true, false} {
			q, args, want := query, make([]any, n), "USING INDEX runs_namespace_id (namespace=? AND id=?)"
			if bySeq {
				q, args, want = ckBySeq(query, n), append(args, int64(1)), "USING INTEGER PRIMARY KEY (rowid=?)"
			}
			if got := queryPlan(t, s, q, args...); !strings.Contains(got, want) {
				t.Errorf("%s, by sequence %v: plan %q, want %q", name, bySeq, got, want)
			}
		}
	}
}

// TestCheckpointWithAWrongSequence: a lease whose sequence is another run's
// still checkpoints its own run (found by its ID) and leaves the other alone;
// a stale lease with the right sequence still loses it.
func TestCheckpointWithAWrongSequence(t *testing.T) {
	ctx := context.Background()
	s := openWithRuns(t, "a", "b")
	res, err := s.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "ns", Workflows: []string{"w"}, Max: 2, LeaseDuration: time.Minute})
	if err != nil || len(res.Runs) != 2 {
		t.Fatalf("claim: %v %v", res, err)
	}
	leases := map[string]store.Lease{}
	for _, cr := range res.Runs {
		leases[cr.Run.ID] = cr.Lease()
	}
	a, b := leases["a"], leases["b"]
	if a.RunSeq == 0 || b.RunSeq == 0 || a.RunSeq == b.RunSeq {
		t.Fatalf("leases without their runs' sequences: %+v %+v", a, b)
	}
	wrong := a
	wrong.RunSeq = b.RunSeq
	step := []store.StreamWrite{{Name: "step.completed", Data: []byte(`{}`)}}
	if _, err := s.Checkpoint(ctx, &store.CheckpointParams{Lease: wrong, Status: store.StatusRunning, Stream: step,
		Ops: []*store.Op{{Position: 0, Kind: store.OpStep, Name: "s", Done: true, Result: []byte(`1`)}}}); err != nil {
		t.Fatalf("a step checkpoint with another run's sequence: %v", err)
	}
	wake := time.Now().Add(time.Hour)
	if _, err := s.Checkpoint(ctx, &store.CheckpointParams{Lease: wrong, Status: store.StatusWaiting, WakeAt: &wake}); err != nil {
		t.Fatalf("a waiting checkpoint with another run's sequence: %v", err)
	}
	stale := b
	stale.Token++
	if _, err := s.Checkpoint(ctx, &store.CheckpointParams{Lease: stale, Status: store.StatusSucceeded, Output: []byte(`1`)}); !errors.Is(err, store.ErrLeaseLost) {
		t.Fatalf("a stale lease with its run's sequence: %v, want ErrLeaseLost", err)
	}
	for id, want := range map[string]store.Status{"a": store.StatusWaiting, "b": store.StatusRunning} {
		r, err := s.RunGet(ctx, &store.RunGetParams{Namespace: "ns", Ref: id})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != want {
			t.Errorf("run %s: %s, want %s", id, r.Status, want)
		}
	}
	ev, err := s.StreamRead(ctx, &store.StreamReadParams{Namespace: "ns", RunID: "b"})
	if err != nil || len(ev.Events) != 0 {
		t.Errorf("run b's stream: %+v %v, want no events", ev, err)
	}
	ev, err = s.StreamRead(ctx, &store.StreamReadParams{Namespace: "ns", RunID: "a"})
	if err != nil || len(ev.Events) == 0 || ev.Events[0].Name != "step.completed" {
		t.Errorf("run a's stream: %+v %v, want its step's event", ev, err)
	}
}

// queryPlan is SQLite's plan of query, its steps joined with "; ".
func queryPlan(t *testing.T, s *Store, query string, args ...any) string {
	t.Helper()
	rows, err := s.readDB.QueryContext(context.Background(), "EXPLAIN QUERY PLAN "+query, args...)
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return strings.Join(plan, "; ")
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
