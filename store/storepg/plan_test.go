package storepg

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/store"
)

// openPlanSchema opens a store on a fresh schema (its URL's parameters plus
// params, "" or "&name=value...") and a connection of its own on that schema, both
// closed at cleanup.
func openPlanSchema(t *testing.T, params string) (*Store, *pgx.Conn) {
	t.Helper()
	cfg, err := ParseURL(pgtest.SchemaURL(t) + params)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	conn, err := pgx.Connect(t.Context(), pgtest.URL(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(t.Context(), "SET search_path = "+pgx.Identifier{cfg.Schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	return s, conn
}

// TestClaimPlanWithBacklog checks that a claim reads the runs of the workflows
// it serves and no others, never the whole table, beside a backlog of 100,000
// pending runs: for the workflow of the backlog, for one with a few pending runs,
// for one with none, and for pairs of those; before the table has statistics and
// after. A claim that walked the namespace's pending runs in claim order
// (runs_pending) and filtered them by workflow read the whole backlog on each
// claim of a worker whose workflows had none: 40 ms a claim, on every poll.
func TestClaimPlanWithBacklog(t *testing.T) {
	_, conn := openPlanSchema(t, "")
	ctx := t.Context()
	// A claim prepared and run on the empty table, then run beside the backlog
	// on the same connection (the store's statement cache prepares it once).
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, sqlClaimPlan); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Prepare(ctx, "prepared_claim", sqlClaim); err != nil {
		t.Fatal(err)
	}
	for range 8 { // past the five custom plans after which a generic one may be kept
		if _, err := tx.Exec(ctx, "prepared_claim", claimArgs([]string{"few"}, time.Now())...); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	seed := `INSERT INTO runs (namespace, id, workflow_id, workflow, queue, status, available_at, created_at, updated_at)
		SELECT 'default', $1 || g, $1 || g, $1, 'default', 'pending', now() - interval '1 second', now(), now()
		FROM generate_series(1, $2) g`
	for wf, n := range map[string]int{"backlog": 100_000, "few": 100} {
		if _, err := conn.Exec(ctx, seed, wf, n); err != nil {
			t.Fatal(err)
		}
	}
	plan := claimPlan(t, conn, `EXPLAIN ANALYZE EXECUTE prepared_claim('default', now(), '{few}', '{}', 64, 'w',
		now() + interval '1 minute', 0, '{few@0}')`)
	if text := strings.Join(plan, "\n"); !strings.Contains(text, "runs_pending_workflow on runs") || strings.Contains(text, "Seq Scan on runs") {
		t.Errorf("the claim prepared on the empty table kept its plan:\n%s", text)
	}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := conn.Exec(ctx, "ANALYZE runs"); err != nil {
				t.Fatal(err)
			}
		}
		checkClaimPlans(t, conn, fmt.Sprintf("analyzed %v", analyzed))
	}
}

// claimArgs are sqlClaim's arguments for a worker of workflows wfs (of version 0).
func claimArgs(wfs []string, now time.Time) []any {
	return []any{"default", now, wfs, []string{}, 64, "w", now.Add(time.Minute), now.UnixMicro(),
		servedPins(&store.RunsClaimParams{Workflows: wfs, Versions: map[string][]int{wfs[0]: {0}}})}
}

// checkClaimPlans explains the claim's statements as RunsClaim runs them (in a
// transaction that sqlClaimPlan set up): neither reads the whole table, the
// claim walks runs_pending_workflow (one ordered walk per workflow), and, run
// (EXPLAIN ANALYZE, rolled back), it filters out no more rows than the front
// of the namespace's pending runs it reads first (sqlClaim): its limit and 64.
func checkClaimPlans(t *testing.T, conn *pgx.Conn, when string) {
	const limit = 64 // claimArgs'
	now := time.Now()
	for _, wfs := range [][]string{{"backlog"}, {"few"}, {"none"}, {"backlog", "few"}, {"few", "none"}} {
		for _, q := range []struct{ name, sql string }{
			{"claim", sqlClaim},
			{"next due", sqlNextDue},
		} {
			args := claimArgs(wfs, now)
			if q.name == "next due" {
				args = args[:4]
			}
			plan := claimPlan(t, conn, "EXPLAIN (COSTS OFF) "+q.sql, args...)
			text := strings.Join(plan, "\n")
			if strings.Contains(text, "Seq Scan on runs") {
				t.Errorf("%s: %s for %v scans the table:\n%s", when, q.name, wfs, text)
			}
			if q.name != "claim" {
				// The pending runs not yet due are in runs_pending_available
				// alone (migration 0029), which the query reads by naming its
				// condition.
				if !strings.Contains(text, "runs_pending_available on runs") {
					t.Errorf("%s: next due for %v does not read runs_pending_available:\n%s", when, wfs, text)
				}
				continue
			}
			if !strings.Contains(text, "runs_pending_workflow on runs") || strings.Contains(text, "runs_pending_available on runs") {
				t.Errorf("%s: claim for %v does not walk runs_pending_workflow:\n%s", when, wfs, text)
			}
			for _, line := range claimPlan(t, conn, "EXPLAIN ANALYZE "+q.sql, args...) {
				if strings.HasPrefix(strings.TrimSpace(line), "JIT:") { // compiling took 0.5 s a claim
					t.Errorf("%s: claim for %v was compiled (JIT)", when, wfs)
				}
				var n int
				if _, err := fmt.Sscanf(strings.TrimSpace(line), "Rows Removed by Filter: %d", &n); err == nil && n > limit+64 {
					t.Errorf("%s: claim for %v filtered out %d rows:\n%s", when, wfs, n, text)
				}
			}
		}
	}
}

// claimPlan runs an EXPLAIN of a claim's statement in a transaction set up as
// RunsClaim's (sqlClaimPlan), rolled back, and returns the plan's lines.
func claimPlan(t *testing.T, conn *pgx.Conn, explainQuery string, args ...any) []string {
	t.Helper()
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(t.Context(), sqlClaimPlan); err != nil {
		t.Fatal(err)
	}
	return planLines(t, tx, explainQuery, args...)
}

// TestLookupByIDPlans checks that the statements that find runs by ID (RunsGet,
// LeasesExtend, lockFamilies; by workflow ID, RunsCreate) go through runs_namespace_id (or
// runs_workflow_id) beside 100,000 runs of several
// statuses, before the table has statistics and after: not through an index of
// the statuses they also test, which would read every run of those statuses.
func TestLookupByIDPlans(t *testing.T) {
	_, conn := openPlanSchema(t, "")
	ctx := t.Context()
	seed := `INSERT INTO runs (namespace, id, workflow_id, workflow, queue, status, lease_token, lease_expires_at, created_at, updated_at)
		SELECT 'default', 'r' || g, CASE WHEN g % 7 = 0 THEN 'w' || (g / 7) ELSE 'r' || g END, 'wf', 'default',
			CASE WHEN g % 50 = 0 THEN 'running' WHEN g % 3 = 0 THEN 'pending' ELSE 'succeeded' END,
			g, CASE WHEN g % 50 = 0 THEN now() + interval '1 minute' END, now(), now()
		FROM generate_series(1, 100000) g`
	if _, err := conn.Exec(ctx, seed); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, 300)
	tokens := make([]int64, len(ids))
	steps := make([]*string, len(ids))
	nss := make([]string, len(ids))
	for i := range ids {
		ids[i], tokens[i], nss[i] = fmt.Sprintf("r%d", (i+1)*50), int64((i+1)*50), "default"
	}
	// A lookup by workflow ID that read the namespace's runs by namespace alone
	// (through runs_namespace_id) would pass for a lookup by ID.
	byWorkflowID := []string{"runs_status", "runs_list", "Index Cond: (namespace = 'default'::text)\n"}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := conn.Exec(ctx, "ANALYZE runs"); err != nil {
				t.Fatal(err)
			}
		}
		for _, q := range []struct {
			name, sql string
			args      []any
			bad       []string
		}{
			{"RunsGet, final runs", sqlRunsGet, []any{"default", ids, []string{"succeeded", "failed", "cancelled"}}, []string{"runs_status", "runs_list"}},
			{"RunsGet, any status", sqlRunsGet, []any{"default", ids, []string{}}, []string{"runs_status", "runs_list"}},
			{"RunsCreate's workflow IDs", sqlRunsOfWorkflowIDs, []any{"default", ids}, []string{"runs_status", "runs_list"}},
			// LeasesExtend may also read runs_running once (as many entries
			// as runs running), but never once per lease; it locks each run
			// by a lookup of its own, never by a scan of an array of them
			// (lockRowsInOrder).
			{"LeasesExtend, first pass", sqlExtendSkipping, []any{time.Now(), nss, ids, tokens, steps}, []string{"Index Cond: (namespace = l.namespace)\n", "= ANY"}},
			{"LeasesExtend, second pass", sqlExtendWaiting, []any{time.Now(), nss, ids, tokens, steps}, []string{"Index Cond: (namespace = l.namespace)\n", "= ANY"}},
			// A child-end batch and a cancellation lock the runs' parents and
			// groups (lockFamilies) through the runs' IDs.
			{"lockFamilies of leases, parents", sqlLockFamiliesOfLeases[0], []any{nss, ids}, []string{"runs_status", "runs_list"}},
			{"lockFamilies of leases, groups", sqlLockFamiliesOfLeases[1], []any{nss, ids}, []string{"runs_status", "runs_list"}},
			{"lockFamilies of a ref, parent", sqlLockFamilyOfRef[0], []any{"default", "r50"}, []string{"runs_status", "runs_list"}},
			{"lockFamilies of a ref, group", sqlLockFamilyOfRef[1], []any{"default", "r50"}, []string{"runs_status", "runs_list"}},
			// Lookups by workflow ID read runs_workflow_id for the runs started
			// with one and runs_namespace_id for those started without
			// (workflowIDIs, migration 0019).
			{"a ref's sequence", `SELECT ` + refSeq, []any{"default", "w7"}, byWorkflowID},
			{"a list by workflow ID", `SELECT sequence FROM runs WHERE namespace = $1 AND ` + workflowIDIs("$1", "$2") +
				` ORDER BY sequence DESC LIMIT 101`, []any{"default", "r50"}, byWorkflowID},
			{"a reject start's check", `SELECT EXISTS (SELECT 1 FROM runs WHERE namespace = $1 AND ` + workflowIDIs("$1", "$2") + `)`,
				[]any{"default", "w7"}, byWorkflowID},
			{"a start's check of runs started without a workflow ID", `SELECT ` + implicitFree("$1", "$2", "$3"),
				[]any{"default", "new", "r50"}, byWorkflowID},
		} {
			text := explain(t, conn, q.sql, q.args...)
			for _, bad := range append(q.bad, "Seq Scan on runs") {
				if strings.Contains(text, bad) {
					t.Errorf("analyzed %v: %s reads %s:\n%s", analyzed, q.name, bad, text)
				}
			}
			if !strings.Contains(text, "runs_namespace_id") && !strings.Contains(text, "runs_workflow_id") {
				t.Errorf("analyzed %v: %s does not look runs up by ID:\n%s", analyzed, q.name, text)
			}
		}
	}
}

// explain returns the plan of query with args, without running it, on a
// connection or in a transaction.
func explain(t *testing.T, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, query string, args ...any) string {
	t.Helper()
	return strings.Join(planLines(t, q, "EXPLAIN (COSTS OFF) "+query, args...), "\n")
}

// planLines runs an EXPLAIN statement and returns the lines of the plan.
func planLines(t *testing.T, q interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}, explainQuery string, args ...any) []string {
	t.Helper()
	rows, err := q.Query(t.Context(), explainQuery, args...)
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return plan
}

// TestRunCreatesPlanReadsQueuesOnce checks that the merged create statement
// reads a run's queue once, not once for each column the queue's limits decide.
func TestRunCreatesPlanReadsQueuesOnce(t *testing.T) {
	_, conn := openPlanSchema(t, "")
	now := time.Now()
	texts := []string{"a", "b"}
	ints := []int32{0, 0}
	times := []time.Time{now, now}
	args := []any{texts, texts, texts, texts, texts, ints, ints, [][]byte{nil, nil}, times, times, times,
		[]string{"running", "pending"}, ints, texts, []int64{1, 2}, times, times, texts, texts, ints, []*string{nil, nil}}
	plan := explain(t, conn, sqlRunCreates, args...)
	if n := strings.Count(plan, "on queues"); n != 1 {
		t.Errorf("the plan reads queues %d times, want once:\n%s", n, plan)
	}
}

// TestRunCreatePlanReadsQueuesOnce checks that a lone create's statement, of
// each reuse policy, reads the run's queue once (createdRestricted), not once
// for each column the queue's limits decide: Postgres plans every execution,
// and planning the check six times cost a create 0.19 ms against 0.07.
func TestRunCreatePlanReadsQueuesOnce(t *testing.T) {
	s, conn := openPlanSchema(t, "")
	for _, reuse := range []store.ReusePolicy{store.ReuseRejectActive, store.ReuseReject, store.ReuseReturnExisting} {
		st, _, err := s.runCreateStmt(&store.RunCreateParams{Namespace: "default", ID: "r", WorkflowID: "w", Workflow: "wf",
			Queue: "default", Reuse: reuse, Claim: &store.CreateClaim{Worker: "w", LeaseDuration: time.Minute}})
		if err != nil {
			t.Fatal(err)
		}
		plan := explain(t, conn, st.sql, st.args...)
		if n := strings.Count(plan, "on queues"); n != 1 {
			t.Errorf("reuse %v: the plan reads queues %d times, want once:\n%s", reuse, n, plan)
		}
		if st.sql != sqlRunCreate {
			continue
		}
		// The keyed creator's lone create (keyedOne).
		plan = explain(t, conn, sqlRunCreateKeyed, keyedArgs(st.args)...)
		if n := strings.Count(plan, "on queues"); n != 1 {
			t.Errorf("keyed: the plan reads queues %d times, want once:\n%s", n, plan)
		}
	}
}

// TestLoneCheckpointPlans checks the statement of a lone checkpoint (a batch
// of one, as every checkpoint of w3 is): with the lease's sequence hint
// (store.Lease.RunSeq, which the engine's leases carry) it updates the run
// through runs_pkey and reads runs no other way, which also saves planning a
// lookup (0.12 ms of planning against 0.21-0.31, 30 Nov 2026); without it, it
// finds the run through runs_namespace_id. On 100,000 runs, 2,000 of them
// running, before and after ANALYZE. (On a table that never held a row, the
// planner may take runs_running for either: every running run, of which
// there are none.)
func TestLoneCheckpointPlans(t *testing.T) {
	_, conn := openPlanSchema(t, "")
	ctx, now := t.Context(), time.Now()
	seed := `INSERT INTO runs (namespace, id, workflow_id, workflow, queue, status, lease_token, lease_expires_at, created_at, updated_at)
		SELECT 'default', 'r' || g, 'r' || g, 'wf', 'default', CASE WHEN g % 50 = 0 THEN 'running' ELSE 'succeeded' END,
			g, CASE WHEN g % 50 = 0 THEN now() + interval '1 minute' END, now(), now()
		FROM generate_series(1, 100000) g`
	if _, err := conn.Exec(ctx, seed); err != nil {
		t.Fatal(err)
	}
	ops := []*store.Op{{Position: 0, Kind: store.OpStep, Name: "s", Done: true, Attempts: 1, Result: []byte(`1`), StartedAt: now}}
	events := []store.StreamWrite{{Name: store.StreamStepCompleted, Data: []byte(`{}`)}}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := conn.Exec(ctx, "ANALYZE runs"); err != nil {
				t.Fatal(err)
			}
		}
		for _, hint := range []int64{0, 50} {
			for _, status := range []store.Status{store.StatusRunning, store.StatusSucceeded} {
				ck, err := newCkReq(now, &store.CheckpointParams{Lease: store.Lease{Namespace: "default", RunID: "r50", Token: 50, RunSeq: hint},
					Status: status, Output: []byte(`1`), Ops: ops, Stream: events})
				if err != nil {
					t.Fatal(err)
				}
				st := checkpointStmt(ck)
				plan := explain(t, conn, st.sql, st.args...)
				want, bad := []string{"runs_pkey", "runs_namespace_id"}, []string{"runs_running", "runs_status", "Seq Scan on runs"}
				if hint > 0 {
					want, bad = want[:1], append(bad, "runs_namespace_id")
				}
				for _, w := range want {
					if !strings.Contains(plan, w) {
						t.Errorf("analyzed %v, hint %d, %s: the plan does not read %s:\n%s", analyzed, hint, status, w, plan)
					}
				}
				for _, b := range bad {
					if strings.Contains(plan, b) {
						t.Errorf("analyzed %v, hint %d, %s: the plan reads %s:\n%s", analyzed, hint, status, b, plan)
					}
				}
			}
		}
	}
}

// TestListPlansReadAPage checks that a list of runs reads about a page of rows,
// not the namespace, now that no index holds every run of a namespace in
// sequence order (0018_drop_runs_list.sql): with no filter, by statuses, by
// workflow, past a cursor, in a namespace of 2,500 runs among 97,500 of another
// and in that other. Before the table has statistics, a list never walks the table
// but may read every run of a status that a partial index holds (pending,
// running) and sort them, as a list of that status did before 0018; Postgres'
// autovacuum analyzes a new table once it holds 50 rows.
func TestListPlansReadAPage(t *testing.T) {
	_, conn := openPlanSchema(t, "")
	ctx := t.Context()
	seed := `INSERT INTO runs (namespace, id, workflow_id, workflow, queue, status, lease_token, lease_expires_at, created_at, updated_at)
		SELECT CASE WHEN g % 40 = 0 THEN 'small' ELSE 'big' END, 'r' || g, 'r' || g, 'wf' || (g % 7), 'default',
			CASE WHEN g % 50 = 0 THEN 'running' WHEN g % 3 = 0 THEN 'pending' WHEN g % 11 = 0 THEN 'failed' ELSE 'succeeded' END,
			g, CASE WHEN g % 50 = 0 THEN now() + interval '1 minute' END, now(), now()
		FROM generate_series(1, 100000) g`
	if _, err := conn.Exec(ctx, seed); err != nil {
		t.Fatal(err)
	}
	const page = 50
	lists := map[string]store.RunListParams{
		"no filter":           {},
		"past a cursor":       {Cursor: "50000"},
		"one status":          {Statuses: []store.Status{store.StatusSucceeded}},
		"two statuses":        {Statuses: []store.Status{store.StatusFailed, store.StatusRunning}},
		"a workflow":          {Workflow: "wf3"},
		"a workflow, pending": {Workflow: "wf3", Statuses: []store.Status{store.StatusPending}},
	}
	for _, analyzed := range []bool{false, true} {
		if analyzed {
			if _, err := conn.Exec(ctx, "ANALYZE runs"); err != nil {
				t.Fatal(err)
			}
		}
		for _, ns := range []string{"small", "big"} {
			for name, p := range lists {
				p.Namespace, p.Limit = ns, page
				query, args, _, err := shared.RunListQuery(&p)
				if err != nil {
					t.Fatal(err)
				}
				// A workflow is one run in 7: a page of it reads 7 pages.
				read := rowsRead(t, conn, query, args...)
				if analyzed && read > 7*len(store.AllStatuses)*(page+1) {
					t.Errorf("namespace %s, list %s: read %d rows for a page of %d", ns, name, read, page)
				}
			}
		}
	}
}

// TestRunningListReadsRunningRuns checks that a list of running runs (and
// their count) reads the running runs of the namespace through runs_running,
// which holds nothing else (migration 0029), even when the table's statistics
// say that far more runs are running than are: analyzed while 2 % ran, then
// all but the 40 oldest ended. Planned from those statistics, the list walked
// runs_pkey newest first, filtering by status, and read every run of the table
// to find the old running ones.
func TestRunningListReadsRunningRuns(t *testing.T) {
	_, conn := openPlanSchema(t, "")
	ctx := t.Context()
	for _, q := range []string{
		"ALTER TABLE runs SET (autovacuum_enabled = false)", // the statistics stay as analyzed
		`INSERT INTO runs (namespace, id, workflow_id, workflow, queue, status, lease_token, lease_expires_at, created_at, updated_at)
			SELECT 'ns', 'r' || g, 'r' || g, 'wf', 'default', CASE WHEN g % 50 = 0 THEN 'running' ELSE 'succeeded' END,
			g, CASE WHEN g % 50 = 0 THEN now() + interval '1 minute' END, now(), now() FROM generate_series(1, 100000) g`,
		"ANALYZE runs",
		"UPDATE runs SET status = 'succeeded', lease_expires_at = NULL, finished_at = now() WHERE status = 'running' AND sequence > 2000",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	query, args, _, err := shared.RunListQuery(&store.RunListParams{Namespace: "ns", Limit: 50,
		Statuses: []store.Status{store.StatusRunning}})
	if err != nil {
		t.Fatal(err)
	}
	if read := rowsRead(t, conn, query, args...); read > 100 {
		t.Errorf("the list of 40 running runs read %d rows:\n%s", read,
			strings.Join(planLines(t, conn, "EXPLAIN ANALYZE "+query, args...), "\n"))
	}
	count, args := shared.CountQuery(&store.RunCountsParams{Namespace: "ns"}, store.StatusRunning, store.DefaultCountCap)
	if read := rowsRead(t, conn, count, args...); read > 100 {
		t.Errorf("the count of 40 running runs read %d rows:\n%s", read,
			strings.Join(planLines(t, conn, "EXPLAIN ANALYZE "+count, args...), "\n"))
	}
	var n int
	if err := conn.QueryRow(ctx, count, args...).Scan(&n); err != nil || n != 40 {
		t.Errorf("count of running runs: %d, %v; want 40", n, err)
	}
}

// rowsRead runs query under EXPLAIN ANALYZE and returns the rows its scans of
// runs returned or removed by a filter: how much of the table it read. A
// bitmap scan counts by its heap scan's rows (and those its recheck removed),
// not by the entries of its bitmaps, which would count its rows twice.
func rowsRead(t *testing.T, conn *pgx.Conn, query string, args ...any) int {
	t.Helper()
	plan := planLines(t, conn, "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) "+query, args...)
	// EXPLAIN ANALYZE gives a node's rows (and rows removed) per loop.
	read, loops := 0, 0
	for _, line := range plan {
		l := strings.TrimSpace(strings.TrimLeft(strings.TrimSpace(line), "->"))
		if strings.HasPrefix(l, "Bitmap Index Scan") {
			loops = 0
			continue
		}
		if strings.Contains(l, "Scan") && strings.Contains(l, " on runs") {
			var n int
			loops = 1
			if i := strings.Index(l, "actual rows="); i >= 0 {
				fmt.Sscanf(l[i:], "actual rows=%d loops=%d", &n, &loops)
			}
			read += n * loops
			continue
		}
		if loops > 0 && (strings.HasPrefix(l, "Rows Removed by Filter:") || strings.HasPrefix(l, "Rows Removed by Index Recheck:")) {
			var n int
			fmt.Sscanf(l[strings.Index(l, ":")+1:], "%d", &n)
			read += n * loops
		}
	}
	if strings.Contains(strings.Join(plan, "\n"), "Seq Scan on runs") {
		t.Errorf("a sequential scan of runs:\n%s", strings.Join(plan, "\n"))
	}
	return read
}

// TestListSkipsDeadEntriesOfActiveStatuses checks what the first page of a
// list costs when every run has moved on from pending since the last vacuum:
// runs_status still holds a dead entry under pending for each, which a part
// of the list reading pending walked in full (the first page took 58 ms at
// 10^6 runs, w8). The active statuses are now read only above the page the
// finished runs fill, so the page reads a few index pages, not all of them.
func TestListSkipsDeadEntriesOfActiveStatuses(t *testing.T) {
	for _, from := range []string{"pending", "running"} {
		t.Run(from, func(t *testing.T) { firstPageSkipsDeadEntries(t, from) })
	}
}

// firstPageSkipsDeadEntries is TestListSkipsDeadEntriesOfActiveStatuses for
// runs that were all of status from. Running runs are read through
// runs_running, whose dead entries the first page walked in full when it read
// every running run of the namespace (RunningRuns) in the late part too.
func firstPageSkipsDeadEntries(t *testing.T, from string) {
	_, conn := openPlanSchema(t, "")
	ctx := t.Context()
	for _, q := range []string{
		"ALTER TABLE runs SET (autovacuum_enabled = false)", // the dead entries stay for the test
		`INSERT INTO runs (namespace, id, workflow_id, workflow, queue, status, lease_token, lease_expires_at, created_at, updated_at)
			SELECT 'ns', 'r' || g, 'r' || g, 'wf', 'default', '` + from + `', g,
			CASE WHEN '` + from + `' = 'running' THEN now() + interval '1 minute' END, now(), now() FROM generate_series(1, 50000) g`,
		"ANALYZE runs",
		"UPDATE runs SET status = 'succeeded', lease_expires_at = NULL, finished_at = now()",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	query, args, _, err := shared.RunListQuery(&store.RunListParams{Namespace: "ns", Limit: 50})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second time, after the first set the index entries' dead hints
		plan := planLines(t, conn, "EXPLAIN (ANALYZE, BUFFERS, COSTS OFF, TIMING OFF, SUMMARY OFF) "+query, args...)
		var buffers int
		for _, line := range plan {
			if strings.Contains(line, "Buffers: shared") { // the top node's: the whole statement's
				for _, m := range sharedBuffers.FindAllStringSubmatch(line, -1) {
					n, _ := strconv.Atoi(m[1])
					buffers += n
				}
				break
			}
		}
		if buffers == 0 || buffers > 300 {
			t.Fatalf("the first page read %d buffers (want 1 to 300):\n%s", buffers, strings.Join(plan, "\n"))
		}
		t.Logf("the first page read %d buffers", buffers)
	}
}

// sharedBuffers matches the counts of an EXPLAIN line's "Buffers: shared hit=N read=M".
var sharedBuffers = regexp.MustCompile(`(?:hit|read)=(\d+)`)

// TestGenericPlans checks the statements a batch executes with their generic
// plans (stmt.generic, sqlGenericPlans): each connection makes such a plan once
// and keeps it, whatever the tables hold later, so it must be the plan a
// custom one would be in every state a table can be in when the plan is made:
// a table that never held a row (no statistics: the planner's costs tie),
// 100,000 runs without statistics, and after ANALYZE. A lone checkpoint with
// the sequence hint reads runs through runs_pkey alone; a lone create of a run
// whose workflow ID is its ID reads no index of runs; the keyed start's
// statements read idempotency_keys through its primary key. Statements left
// to custom plans are not flagged.
func TestGenericPlans(t *testing.T) {
	s, conn := openPlanSchema(t, "")
	ctx, now := t.Context(), time.Now()
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = force_generic_plan"); err != nil {
		t.Fatal(err)
	}
	op := &store.Op{Position: 0, Kind: store.OpStep, Name: "s", Done: true, Attempts: 1, Result: []byte(`1`), StartedAt: now}
	ev := store.StreamWrite{Name: store.StreamStepCompleted, Data: []byte(`{}`)}
	type check struct {
		name      string
		st        stmt
		want, bad []string
	}
	var checks []check
	wake := now.Add(time.Hour)
	for i, p := range []store.CheckpointParams{
		{Status: store.StatusRunning, Ops: []*store.Op{op}},
		{Status: store.StatusRunning, Ops: []*store.Op{op, op}, Stream: []store.StreamWrite{ev}},
		{Status: store.StatusWaiting, WakeAt: &wake, Stream: []store.StreamWrite{ev, ev}},
		{Status: store.StatusSucceeded, Output: []byte(`1`), Ops: []*store.Op{op}, Stream: []store.StreamWrite{ev, ev}},
		{Status: store.StatusFailed, Error: &store.ErrorInfo{Message: "x"}, Ops: []*store.Op{op}},
	} {
		p.Lease = store.Lease{Namespace: "default", RunID: "r50", Token: 50, RunSeq: 50}
		ck, err := newCkReq(now, &p)
		if err != nil {
			t.Fatal(err)
		}
		st := checkpointStmt(ck)
		if !st.generic {
			t.Fatalf("a lone %s checkpoint with the sequence hint is not planned once", p.Status)
		}
		checks = append(checks, check{fmt.Sprintf("checkpoint %d (%s)", i, p.Status), st,
			[]string{"runs_pkey"}, []string{"runs_running", "runs_status", "runs_namespace_id", "Seq Scan", "Bitmap"}})
	}
	cp := &store.RunCreateParams{Namespace: "default", ID: "rx", WorkflowID: "rx", Workflow: "wf", Queue: "default",
		Claim: &store.CreateClaim{Worker: "w", LeaseDuration: time.Minute}}
	create, _, err := s.runCreateStmt(cp)
	if err != nil {
		t.Fatal(err)
	}
	if !create.generic || create.sql != sqlRunCreateOwnID {
		t.Fatal("a lone create of a run whose workflow ID is its ID is not planned once")
	}
	noRuns := []string{"runs_", "Seq Scan", "Bitmap", "idempotency_keys_created", "idempotency_keys_run"}
	keys := []string{"idempotency_keys_pkey"}
	checks = append(checks,
		check{"create", create, []string{"queues_pkey"}, noRuns},
		check{"keyed create", stmt{sql: sqlRunCreateOwnIDKeyed, args: keyedArgs(create.args)}, []string{"Insert on idempotency_keys"}, noRuns},
		check{"key fingerprint", stmt{sql: sqlKeyFingerprint, args: []any{"default", "key"}}, keys, noRuns},
		check{"key finish", stmt{sql: sqlKeyFinish, args: []any{"default", "key", int32(201), []byte("{}"), int64(1)}}, keys, noRuns},
		check{"key delete", stmt{sql: sqlKeyDelete, args: []any{"default", "key"}}, keys, noRuns},
	)
	// Left to custom plans: without the hint, with kv writes, another workflow ID.
	ck, err := newCkReq(now, &store.CheckpointParams{Lease: store.Lease{Namespace: "default", RunID: "r50", Token: 50},
		Status: store.StatusRunning, Ops: []*store.Op{op}})
	if err != nil {
		t.Fatal(err)
	}
	if checkpointStmt(ck).generic {
		t.Error("a checkpoint without the sequence hint is planned once")
	}
	ck, err = newCkReq(now, &store.CheckpointParams{Lease: store.Lease{Namespace: "default", RunID: "r50", Token: 50, RunSeq: 50},
		Status: store.StatusRunning, KV: []store.KVWrite{{Key: "k", Value: []byte("1")}}})
	if err != nil {
		t.Fatal(err)
	}
	if checkpointStmt(ck).generic {
		t.Error("a checkpoint that writes kv is planned once")
	}
	cp.WorkflowID = "other"
	if st, _, err := s.runCreateStmt(cp); err != nil || st.generic {
		t.Errorf("a create with a workflow ID of its own is planned once (%v)", err)
	}

	seed := `INSERT INTO runs (namespace, id, workflow_id, workflow, queue, status, lease_token, lease_expires_at, created_at, updated_at)
		SELECT 'default', 'r' || g, 'r' || g, 'wf', 'default', CASE WHEN g % 50 = 0 THEN 'running' ELSE 'succeeded' END,
			g, CASE WHEN g % 50 = 0 THEN now() + interval '1 minute' END, now(), now()
		FROM generate_series(1, 100000) g`
	for i, state := range []string{"never held a row", "100,000 runs, no statistics", "analyzed"} {
		switch i {
		case 1:
			if _, err := conn.Exec(ctx, seed); err != nil {
				t.Fatal(err)
			}
		case 2:
			if _, err := conn.Exec(ctx, "ANALYZE runs"); err != nil {
				t.Fatal(err)
			}
		}
		for j, c := range checks {
			plan := genericPlan(t, conn, fmt.Sprintf("g%d_%d", i, j), c.st)
			for _, w := range c.want {
				if !strings.Contains(plan, w) {
					t.Errorf("%s, %s: the generic plan does not read %s:\n%s", state, c.name, w, plan)
				}
			}
			for _, b := range c.bad {
				if strings.Contains(plan, b) {
					t.Errorf("%s, %s: the generic plan reads %s:\n%s", state, c.name, b, plan)
				}
			}
		}
	}
}

// keyedArgs are the arguments of a keyed lone create (sqlRunCreateKeyed,
// sqlRunCreateOwnIDKeyed) of the create whose arguments are args.
func keyedArgs(args []any) []any {
	return append(slices.Clip(args), "key", []byte("fp"), int32(201), []byte("{}"), int32(201), []byte("{}"))
}

// genericPlan prepares st as name on conn (whose plan_cache_mode is
// force_generic_plan) and returns the plan of its execution: the generic plan,
// made now, in a transaction rolled back.
func genericPlan(t *testing.T, conn *pgx.Conn, name string, st stmt) string {
	t.Helper()
	if _, err := conn.Prepare(t.Context(), name, st.sql); err != nil {
		t.Fatal(err)
	}
	params := make([]string, len(st.args))
	for i := range params {
		params[i] = fmt.Sprintf("$%d", i+1)
	}
	tx, err := conn.Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	// EXPLAIN EXECUTE takes its arguments as literals: the simple protocol
	// writes them into the text.
	args := append([]any{pgx.QueryExecModeSimpleProtocol}, st.args...)
	return strings.Join(planLines(t, tx, "EXPLAIN (COSTS OFF) EXECUTE "+name+"("+strings.Join(params, ", ")+")", args...), "\n")
}

// TestLoneWritesRunOnGenericPlans checks, on the store's own connections, that
// the writer runs what stmt.generic flags on generic plans and the rest on
// custom ones: a lone create of a run whose workflow ID is its ID, keyed or
// not (with its key's statements, the delete of a rejected start's key
// included), and a lone checkpoint with the lease's
// sequence are never planned for their arguments
// (pg_prepared_statements counts each connection's plans of a statement), a
// create with a workflow ID of its own always is.
func TestLoneWritesRunOnGenericPlans(t *testing.T) {
	s, _ := openPlanSchema(t, "")
	ctx := t.Context()
	ev := []store.StreamWrite{{Name: store.StreamStepCompleted, Data: []byte(`{}`)}}
	var ckSQLText string
	for i := range 8 {
		id := fmt.Sprint("own-", i)
		if _, err := s.RunCreate(ctx, &store.RunCreateParams{Namespace: "default", ID: id, WorkflowID: id, Workflow: "wf", Queue: "default"}); err != nil {
			t.Fatal(err)
		}
		if _, err := s.RunCreate(ctx, &store.RunCreateParams{Namespace: "default", ID: fmt.Sprint("named-", i), WorkflowID: fmt.Sprint("wid-", i), Workflow: "other", Queue: "default"}); err != nil {
			t.Fatal(err)
		}
		keyed := fmt.Sprint("keyed-", i)
		rec := &store.IdempotencyRecord{Key: keyed, Fingerprint: []byte{1},
			Response: func(any) (int, []byte, error) { return 201, []byte(`{}`), nil }}
		if _, err := s.RunCreate(ctx, &store.RunCreateParams{Namespace: "default", ID: keyed, WorkflowID: keyed, Workflow: "other", Queue: "default", Idempotency: rec}); err != nil {
			t.Fatal(err)
		}
		// A start of a taken run ID under a new key: rejected, its key taken back.
		taken := &store.IdempotencyRecord{Key: "taken-" + keyed, Fingerprint: []byte{1}, Response: rec.Response}
		if _, err := s.RunCreate(ctx, &store.RunCreateParams{Namespace: "default", ID: keyed, WorkflowID: keyed, Workflow: "other", Queue: "default", Idempotency: taken}); !errors.Is(err, store.ErrRunExists) {
			t.Fatalf("a keyed start of a taken run ID: %v, want ErrRunExists", err)
		}
		if _, err := s.IdempotencyGet(ctx, &store.IdempotencyGetParams{Namespace: "default", Key: taken.Key}); !errors.Is(err, store.ErrIdempotencyKeyNotFound) {
			t.Fatalf("the key of a rejected start: %v, want ErrIdempotencyKeyNotFound", err)
		}
		res, err := s.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "default", Workflows: []string{"wf"}, Worker: "w", Max: 1, LeaseDuration: time.Minute})
		if err != nil || len(res.Runs) != 1 {
			t.Fatalf("claim: %v, %v", res, err)
		}
		p := &store.CheckpointParams{Lease: res.Runs[0].Lease(), Status: store.StatusRunning, Stream: ev,
			Ops: []*store.Op{{Position: 0, Kind: store.OpStep, Name: "s", Done: true, Attempts: 1, Result: []byte(`1`), StartedAt: time.Now()}}}
		ck, err := newCkReq(time.Now(), p)
		if err != nil {
			t.Fatal(err)
		}
		ckSQLText = checkpointStmt(ck).sql
		if _, err := s.Checkpoint(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	type plans struct{ generic, custom int64 }
	want := []struct {
		name, text string
		generic    bool // generic plans only; else custom ones only
	}{
		{"the create of a run whose workflow ID is its ID", sqlRunCreateOwnID, true},
		{"the checkpoint", ckSQLText, true},
		{"a keyed create of such a run", sqlRunCreateOwnIDKeyed, true},
		{"a create with a workflow ID of its own", sqlRunCreate, false},
	}
	got := map[string]*plans{}
	for _, w := range want {
		got[w.text] = &plans{}
	}
	conns := s.pool.AcquireAllIdle(ctx)
	for _, c := range conns {
		rows, err := c.Query(ctx, `SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements`)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var (
				text    string
				gen, cu int64
			)
			if err := rows.Scan(&text, &gen, &cu); err != nil {
				t.Fatal(err)
			}
			if p := got[text]; p != nil {
				p.generic, p.custom = p.generic+gen, p.custom+cu
			}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		c.Release()
	}
	for _, w := range want {
		p := got[w.text]
		if w.generic && (p.generic == 0 || p.custom != 0) {
			t.Errorf("%s: %d generic plans, %d custom, want generic ones only", w.name, p.generic, p.custom)
		}
		if !w.generic && (p.custom == 0 || p.generic != 0) {
			t.Errorf("%s: %d generic plans, %d custom, want custom ones only", w.name, p.generic, p.custom)
		}
	}
}

// TestPurgeWalksReadAPage checks what retention reads without an index of
// its own (migration 0030): beside 100,000 finished runs of another namespace
// none expired, the walk of a finished status reads at most its page, in a
// namespace with nothing expired as in one with a backlog; and the purge
// deletes the expired runs and only those, past runs created before the cutoff
// that finished after it.
func TestPurgeWalksReadAPage(t *testing.T) {
	s, conn := openPlanSchema(t, "")
	ctx := t.Context()
	insert := `INSERT INTO runs (namespace, id, workflow_id, workflow, queue, status, created_at, updated_at, finished_at)
		SELECT $1::text, $2::text || g, $2::text || g, 'wf', 'default', 'succeeded', now() - $3::interval, now(), now() - $4::interval
		FROM generate_series(1, $5::int) g`
	for _, q := range []struct {
		ns, name, made, ended string
		n                     int
	}{
		{"big", "b", "0s", "0s", 100000},
		{"ns", "long", "2h", "0s", 1000}, // created before the cutoff, finished after
		{"ns", "old", "2h", "90m", 1000}, // expired
		{"ns", "new", "0s", "0s", 1000},
	} {
		if _, err := conn.Exec(ctx, insert, q.ns, q.name, q.made, q.ended, q.n); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, "ANALYZE runs"); err != nil {
		t.Fatal(err)
	}
	cutoff := time.Now().Add(-time.Hour)
	for _, ns := range []string{"big", "ns"} {
		for _, walk := range shared.PurgeWalks() {
			read := rowsRead(t, conn, walk, ns, cutoff, 0, 500)
			t.Logf("%s: %d rows", ns, read)
			if read > 500 {
				t.Errorf("a purge's walk in %s read %d rows:\n%s", ns, read,
					strings.Join(planLines(t, conn, "EXPLAIN ANALYZE "+walk, ns, cutoff, 0, 500), "\n"))
			}
		}
	}
	deleted := 0
	for {
		n, err := s.RunsPurge(ctx, &store.RunsPurgeParams{Namespace: "ns", FinishedBefore: cutoff, Limit: 300})
		if err != nil {
			t.Fatal(err)
		}
		deleted += n
		if n < 300 {
			break
		}
	}
	var left, expired int
	if err := conn.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE finished_at < $1) FROM runs WHERE namespace = 'ns'`,
		cutoff).Scan(&left, &expired); err != nil {
		t.Fatal(err)
	}
	if deleted != 1000 || left != 2000 || expired != 0 {
		t.Errorf("purged %d runs, %d left of which %d expired; want 1000, 2000 and 0", deleted, left, expired)
	}
}
