package storesqlite

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// TestBatchIsolatesFailures commits, in one batch, good checkpoints and one with
// a stale lease token: only the stale one fails, and it writes nothing.
func TestBatchIsolatesFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openWithRuns(t, "a", "b", "c")
	var leases []store.Lease
	res, err := s.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "ns", Workflows: []string{"w"}, Max: 3, LeaseDuration: time.Minute})
	if err != nil || len(res.Runs) != 3 {
		t.Fatalf("claim: %v %v", res, err)
	}
	for _, cr := range res.Runs {
		leases = append(leases, store.Lease{Namespace: "ns", RunID: cr.Run.ID, Token: cr.LeaseToken})
	}
	leases[1].Token++ // stale (from the future, which is just as wrong)

	batch := make([]*request, len(leases))
	for i, l := range leases {
		p := &store.CheckpointParams{
			Lease: l, Status: store.StatusRunning,
			Ops: []*store.Op{{Position: 0, Kind: store.OpStep, Name: "s", Done: true}},
			KV:  []store.KVWrite{{Key: "k", Value: []byte("v")}},
		}
		batch[i] = &request{ctx: ctx, done: make(chan error, 1), apply: func(tx *wtx) error {
			_, err := checkpoint(tx, p, nil)
			return err
		}}
	}
	before := s.Stats()
	commitByHand(s, batch)
	if st := s.Stats(); st.Transactions != before.Transactions+1 || st.Requests != before.Requests+3 || st.Replays != before.Replays {
		t.Fatalf("stats %+v -> %+v, want one transaction of 3 requests, not replayed", before, st)
	}
	for i, r := range batch {
		err := <-r.done
		if wantLost := i == 1; wantLost != errors.Is(err, store.ErrLeaseLost) || (!wantLost && err != nil) {
			t.Errorf("request %d: %v", i, err)
		}
	}
	for i, l := range leases {
		ops, err := s.HistoryList(ctx, &store.HistoryListParams{Namespace: "ns", Ref: l.RunID})
		if err != nil {
			t.Fatal(err)
		}
		if want := 1 - btoi(i == 1); len(ops) != want {
			t.Errorf("run %s has %d ops, want %d", l.RunID, len(ops), want)
		}
		_, err = s.KVGet(ctx, &store.KVGetParams{Namespace: "ns", Ref: l.RunID, Key: "k"})
		if (i == 1) != errors.Is(err, store.ErrKeyNotFound) {
			t.Errorf("run %s KVGet: %v", l.RunID, err)
		}
	}
}

// TestBatchReplaysFailedWrites fails one request after it has written: the batch
// is replayed with savepoints, so only that request's writes are undone.
func TestBatchReplaysFailedWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "t.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	boom := errors.New("boom")
	batch := make([]*request, 3)
	for i, id := range []string{"a", "b", "c"} {
		batch[i] = &request{ctx: ctx, done: make(chan error, 1), apply: func(tx *wtx) error {
			_, err := runCreate(tx, &store.RunCreateParams{Namespace: "ns", ID: id, WorkflowID: id,
				Workflow: "w", Queue: "q", Reuse: store.ReuseRejectActive})
			if err == nil && id == "b" {
				return boom
			}
			return err
		}}
	}
	before := s.Stats()
	commitByHand(s, batch)
	if st := s.Stats(); st.Replays != before.Replays+1 || st.Transactions != before.Transactions+1 {
		t.Fatalf("stats %+v -> %+v, want one replayed transaction", before, st)
	}
	for i, r := range batch {
		if err := <-r.done; (i == 1) != errors.Is(err, boom) || (i != 1 && err != nil) {
			t.Errorf("request %d: %v", i, err)
		}
	}
	for _, id := range []string{"a", "b", "c"} {
		_, err := s.RunGet(ctx, &store.RunGetParams{Namespace: "ns", Ref: id})
		if (id == "b") != errors.Is(err, store.ErrRunNotFound) {
			t.Errorf("run %s: %v", id, err)
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestCloseStopsGoroutines checks that Close ends the writer and the WAL
// checkpointer.
func TestCloseStopsGoroutines(t *testing.T) {
	t.Parallel()
	s, err := Open(context.Background(), Config{Path: filepath.Join(t.TempDir(), "t.db")})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for name, ch := range map[string]chan struct{}{"writer": s.w.stopped, "checkpointer": s.ckpt.stopped} {
		select {
		case <-ch:
		default:
			t.Errorf("%s still running after Close", name)
		}
	}
}

// TestRolledBackReportsTheWritesError pins what a batch's callers are told when
// SQLite rolled the transaction back by itself (an I/O error or a full disk in
// the middle of a statement), so that the writer's ROLLBACK found none open: the
// error of the request that failed, not the failed ROLLBACK's.
func TestRolledBackReportsTheWritesError(t *testing.T) {
	w := &writer{}
	full := errors.New("database or disk is full (13)")
	batch := []*request{
		{err: nil}, // applied before the failure: lost with the transaction
		{err: context.Canceled},
		{err: fmt.Errorf("checkpointing: %w", store.ErrLeaseLost)}, // clean: wrote nothing
		{err: full},
		{err: nil}, // not reached
	}
	noTx := errors.New("SQL logic error: cannot rollback - no transaction is active (1)")
	if got := w.rolledBack(batch, noTx); !errors.Is(got, full) {
		t.Errorf("rolledBack = %v, want %v", got, full)
	}
	if got := w.rolledBack(batch, errors.New("disk I/O error (10)")); got != nil {
		t.Errorf("rolledBack of a ROLLBACK that failed otherwise = %v, want nil", got)
	}
	if got := w.rolledBack(batch[:3], noTx); got != nil {
		t.Errorf("rolledBack without a failed write = %v, want nil", got)
	}
}

// TestBatchEndsFinishedRunsTogether drives one batch of checkpoints that only
// end their runs (as jobs' outcomes do), which the writer applies with one
// statement: each gets its own outcome (a stale lease fails alone, a retry of
// an applied write is answered as applied, a requested cancellation is
// reported), ended children count in their group and wake their parent, a
// second write to one of the runs is applied on its own, and a checkpoint that
// writes more in the same batch is applied as before.
//
// The leases carry their run's sequence (as the engine's do: the statement finds
// the runs by rowid) or not (found by namespace and ID); with sequences, one
// lease carries another run's, which must end neither run through the merged
// statement: its finish is applied on its own.
func TestBatchEndsFinishedRunsTogether(t *testing.T) {
	t.Parallel()
	for _, bySeq := range []bool{false, true} {
		t.Run(fmt.Sprint("by sequence: ", bySeq), func(t *testing.T) { testBatchEndsFinishedRunsTogether(t, bySeq) })
	}
}

func testBatchEndsFinishedRunsTogether(t *testing.T, bySeq bool) {
	ctx := context.Background()
	ids := []string{"ok", "stale", "failed", "cancelled", "retried", "more", "parent", "hinted"}
	s := openWithRuns(t, ids...)
	leases := map[string]store.Lease{}
	claim := func(wf string, n int) {
		t.Helper()
		res, err := s.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "ns", Workflows: []string{wf}, Max: n, LeaseDuration: time.Minute})
		if err != nil || len(res.Runs) != n {
			t.Fatalf("claim of %s: %v %v", wf, res, err)
		}
		for _, cr := range res.Runs {
			leases[cr.Run.ID] = store.Lease{Namespace: "ns", RunID: cr.Run.ID, Token: cr.LeaseToken}
			if bySeq {
				leases[cr.Run.ID] = cr.Lease()
			}
		}
	}
	claim("w", len(ids))
	// The parent starts a group of two children and waits for it.
	g := &store.ChildGroup{Position: 1, Runs: []*store.RunCreateParams{
		{ID: "kid-0", WorkflowID: "kid-0", Workflow: "kid", Queue: "q"},
		{ID: "kid-1", WorkflowID: "kid-1", Workflow: "kid", Queue: "q"}}}
	wake := time.Now().Add(time.Hour)
	if _, err := s.Checkpoint(ctx, &store.CheckpointParams{Lease: leases["parent"], Status: store.StatusWaiting,
		WakeAt: &wake, WaitEvents: []string{store.GroupEvent(1)}, Children: []*store.ChildGroup{g},
		Ops: []*store.Op{{Position: 1, Kind: store.OpChild, Name: "map", StartedAt: time.Now()}}}); err != nil {
		t.Fatal(err)
	}
	claim("kid", 2)
	if _, err := s.RunCancel(ctx, &store.RunCancelParams{Namespace: "ns", Ref: "cancelled"}); err != nil {
		t.Fatal(err)
	}
	retry := &store.CheckpointParams{Lease: leases["retried"], Status: store.StatusSucceeded, Output: []byte(`"once"`), Seq: 1, Fingerprint: 42}
	if _, err := s.Checkpoint(ctx, retry); err != nil {
		t.Fatal(err)
	}
	stale := leases["stale"]
	stale.Token++
	hinted := leases["hinted"]
	if bySeq {
		hinted.RunSeq = leases["ok"].RunSeq // another run's sequence
	}
	params := []*store.CheckpointParams{
		{Lease: leases["ok"], Status: store.StatusSucceeded, Output: []byte(`"ok"`)},
		{Lease: stale, Status: store.StatusSucceeded, Output: []byte(`"no"`)},
		{Lease: leases["failed"], Status: store.StatusFailed, Error: &store.ErrorInfo{Message: "boom", Type: "E"}},
		{Lease: leases["cancelled"], Status: store.StatusSucceeded, Output: []byte(`"late"`)},
		{Lease: leases["retried"], Status: store.StatusSucceeded, Output: []byte(`"once"`), Seq: 1, Fingerprint: 42},
		{Lease: leases["more"], Status: store.StatusSucceeded, Output: []byte(`"more"`),
			Ops: []*store.Op{{Position: 0, Kind: store.OpStep, Name: "s", Done: true}}},
		{Lease: leases["kid-0"], Status: store.StatusSucceeded, Output: []byte(`0`)},
		{Lease: leases["kid-1"], Status: store.StatusSucceeded, Output: []byte(`1`)},
		// A second write to a run of the batch: applied on its own, after the first.
		{Lease: leases["ok"], Status: store.StatusSucceeded, Output: []byte(`"twice"`)},
		{Lease: hinted, Status: store.StatusSucceeded, Output: []byte(`"hinted"`)},
	}
	batch := make([]*request, len(params))
	fins := make([]*finish, len(params))
	for i, p := range params {
		errText, err := errJSON(p.Error)
		if err != nil {
			t.Fatal(err)
		}
		batch[i], fins[i] = checkpointRequest(ctx, p, errText)
	}
	if batch[5].fin != nil || batch[0].fin == nil {
		t.Fatal("a checkpoint with ops was taken for one that only ends its run, or the reverse")
	}

	before := s.Stats()
	commitByHand(s, batch)
	if st := s.Stats(); st.Transactions != before.Transactions+1 || st.Replays != before.Replays {
		t.Fatalf("stats %+v -> %+v, want one transaction, not replayed", before, st)
	}
	for i, r := range batch {
		err := <-r.done
		if wantLost := i == 1 || i == 8; wantLost != errors.Is(err, store.ErrLeaseLost) || (!wantLost && err != nil) {
			t.Errorf("checkpoint %d of %s: %v", i, params[i].Lease.RunID, err)
		}
	}

	if res := fins[3].res; res == nil || !res.CancelRequested {
		t.Errorf("result of the cancelled run's checkpoint = %+v, want CancelRequested", res)
	}
	if res := fins[0].res; res == nil || res.CancelRequested || res.At.IsZero() {
		t.Errorf("result of ok's checkpoint = %+v", res)
	}
	if res := fins[4].res; res == nil || !res.Replayed {
		t.Errorf("result of the retried checkpoint = %+v, want Replayed", res)
	}
	want := map[string]struct {
		status store.Status
		output string
	}{
		"ok": {store.StatusSucceeded, `"ok"`}, "stale": {store.StatusRunning, ""}, "failed": {store.StatusFailed, ""},
		"retried": {store.StatusSucceeded, `"once"`}, "more": {store.StatusSucceeded, `"more"`},
		"kid-0": {store.StatusSucceeded, `0`}, "kid-1": {store.StatusSucceeded, `1`},
		"hinted": {store.StatusSucceeded, `"hinted"`},
	}
	for id, w := range want {
		run, err := s.RunGet(ctx, &store.RunGetParams{Namespace: "ns", Ref: id})
		if err != nil {
			t.Fatal(err)
		}
		if run.Status != w.status || string(run.Output) != w.output {
			t.Errorf("run %s: %s %q, want %s %q", id, run.Status, run.Output, w.status, w.output)
		}
		if w.status.Terminal() && run.FinishedAt == nil {
			t.Errorf("run %s ended without FinishedAt", id)
		}
	}
	if run, err := s.RunGet(ctx, &store.RunGetParams{Namespace: "ns", Ref: "failed"}); err != nil || run.Error == nil || run.Error.Message != "boom" {
		t.Errorf("failed run: %+v %v, want its error", run, err)
	}
	if ops, err := s.HistoryList(ctx, &store.HistoryListParams{Namespace: "ns", Ref: "more"}); err != nil || len(ops) != 1 {
		t.Errorf("history of more: %v %v, want its op", ops, err)
	}
	// Both children ended in the batch: the group's event woke the parent.
	res, err := s.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "ns", Workflows: []string{"w"}, Max: 10, LeaseDuration: time.Minute})
	if err != nil || len(res.Runs) != 1 || res.Runs[0].Run.ID != "parent" {
		t.Fatalf("claim after the children ended: %v %v, want the parent", res, err)
	}
	var names []string
	for _, ev := range res.Runs[0].Inbox {
		names = append(names, ev.Name)
	}
	if len(names) != 1 || names[0] != store.GroupEvent(1) {
		t.Fatalf("parent's inbox = %v, want the group's event", names)
	}
}

// commitByHand stops s's writer goroutine, commits batch as one of the writer's
// batches, and starts the goroutine again.
func commitByHand(s *Store, batch []*request) {
	close(s.w.quit)
	<-s.w.stopped
	s.w.quit = make(chan struct{})
	s.w.commit(batch)
	s.w.stopped = make(chan struct{})
	go s.w.run()
}

// openWithRuns opens a store in a temporary directory, closed at the test's end,
// and creates pending runs of workflow "w" with the IDs given, in namespace ns.
func openWithRuns(t *testing.T, ids ...string) *Store {
	t.Helper()
	ctx := context.Background()
	s, err := Open(ctx, Config{Path: filepath.Join(t.TempDir(), "t.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for _, id := range ids {
		if _, err := s.RunCreate(ctx, &store.RunCreateParams{Namespace: "ns", ID: id, WorkflowID: id, Workflow: "w", Queue: "q"}); err != nil {
			t.Fatal(err)
		}
	}
	return s
}
