package storetest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

var checkpointCases = []testCase{
	{"StaleTokenWritesNothing", checkpointStale},
	{"WrongTokenWritesNothing", checkpointWrongToken},
	{"WrongRunSeqWritesNothing", checkpointWrongRunSeq},
	{"OpsUpsertByPosition", checkpointUpsert},
	{"AttemptsAppended", checkpointAttempts},
	{"KVWritesInOrder", checkpointKV},
	{"RunningKeepsLease", checkpointRunning},
	{"Waiting", checkpointWaiting},
	{"Blocked", checkpointBlocked},
	{"Pending", checkpointPending},
	{"Succeeded", checkpointSucceeded},
	{"Failed", checkpointFailed},
	{"Cancelled", checkpointCancelled},
	{"InvalidStatus", checkpointInvalidStatus},
	{"Concurrent", checkpointConcurrent},
}

// everything is a checkpoint that writes an op, an attempt and a key, and ends the run.
func (e *env) everything() store.CheckpointParams {
	now := e.clk.Now()
	return store.CheckpointParams{
		Status:   store.StatusSucceeded,
		Output:   []byte(`"out"`),
		Ops:      []*store.Op{e.doneStep(0, "s", `1`)},
		Attempts: []store.Attempt{{Position: 0, Attempt: 1, Error: store.ErrorInfo{Message: "x"}, StartedAt: now, FinishedAt: now}},
		KV:       []store.KVWrite{{Key: "k", Value: []byte(`"v"`)}},
	}
}

// wantUntouched fails unless run id has no history and no key k.
func (e *env) wantUntouched(id string) {
	e.t.Helper()
	if ops := e.history(id); len(ops) != 0 {
		e.t.Fatalf("rejected checkpoint wrote history %v", opNames(ops))
	}
	_, err := e.kvGet(id, "k")
	wantErr(e.t, "KVGet after a rejected checkpoint", err, store.ErrKeyNotFound)
}

func checkpointStale(t *testing.T, e *env) {
	stale := e.start()
	e.clk.Advance(leaseDur)
	e.claimOne(stale.Run.ID, claimBy("worker-2"))
	err := e.checkpointErr(stale, e.everything())
	wantErr(t, "Checkpoint with a stale token", err, store.ErrLeaseLost)
	e.wantUntouched(stale.Run.ID)
	if r := e.wantStatus(stale.Run.ID, store.StatusRunning); r.LeaseOwner != "worker-2" || r.Output != nil {
		t.Fatalf("run after a rejected checkpoint = %+v", r)
	}
}

func checkpointWrongToken(t *testing.T, e *env) {
	cr := e.start()
	forged := *cr
	forged.LeaseToken = cr.LeaseToken + 1000
	err := e.checkpointErr(&forged, e.everything())
	wantErr(t, "Checkpoint with a token never issued", err, store.ErrLeaseLost)
	e.wantUntouched(cr.Run.ID)
	e.wantStatus(cr.Run.ID, store.StatusRunning)
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning})
}

// checkpointWrongRunSeq: a lease whose sequence hint (Lease.RunSeq) names
// another run never writes to that run, even where both runs' tokens are equal
// (runs leased by one claim may share it). A store that follows the hint loses
// the lease; one that ignores it checkpoints the run the lease names.
func checkpointWrongRunSeq(t *testing.T, e *env) {
	a, b := e.create(), e.create()
	res := e.claim(claimMax(2))
	if len(res.Runs) != 2 {
		t.Fatalf("claimed %v, want [%s %s]", claimedIDs(res.Runs), a.ID, b.ID)
	}
	ca, cb := res.Runs[0], res.Runs[1]
	p := e.everything()
	p.Lease = ca.Lease()
	p.Lease.RunSeq = cb.Run.Sequence
	_, err := e.st.Checkpoint(e.ctx, &p)
	switch {
	case err == nil:
		e.wantStatus(ca.Run.ID, store.StatusSucceeded)
	case errors.Is(err, store.ErrLeaseLost):
		e.wantUntouched(ca.Run.ID)
		e.wantStatus(ca.Run.ID, store.StatusRunning)
		e.finish(ca)
	default:
		t.Fatalf("Checkpoint with another run's sequence: %v, want success or ErrLeaseLost", err)
	}
	e.wantUntouched(cb.Run.ID)
	e.wantStatus(cb.Run.ID, store.StatusRunning)
	e.finish(cb)
}

func checkpointUpsert(t *testing.T, e *env) {
	cr := e.start()
	start := e.clk.Now()
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{{
		Position: 0, Kind: store.OpStep, Name: "call", Attempts: 1, StartedAt: start,
		Error: &store.ErrorInfo{Message: "timeout"},
	}}})
	if ops := e.history(cr.Run.ID); len(ops) != 1 || ops[0].Done || ops[0].Attempts != 1 || ops[0].Error == nil {
		t.Fatalf("history after a failed attempt = %+v, want one undone op with its error", ops)
	}
	end := e.clk.Advance(time.Second)
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{{
		Position: 0, Kind: store.OpStep, Name: "call", Done: true, Result: []byte(`42`), Attempts: 2,
		StartedAt: start, FinishedAt: &end,
	}}})
	ops := e.history(cr.Run.ID)
	if len(ops) != 1 {
		t.Fatalf("history = %v, want the op replaced at position 0", opPositions(ops))
	}
	op := ops[0]
	if !op.Done || string(op.Result) != `42` || op.Attempts != 2 || op.Error != nil || op.Name != "call" {
		t.Fatalf("op after upsert = %+v, want done with result 42, 2 attempts, no error", op)
	}
	wantTime(t, "op StartedAt", op.StartedAt, start)
	wantTimePtr(t, "op FinishedAt", op.FinishedAt, end)
}

func checkpointAttempts(t *testing.T, e *env) {
	cr := e.start()
	var want []string
	for i := 1; i <= 3; i++ {
		started := e.clk.Now()
		finished := e.clk.Advance(time.Second)
		msg := fmt.Sprintf("attempt %d failed", i)
		want = append(want, msg)
		e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning,
			Ops: []*store.Op{{Position: 0, Kind: store.OpStep, Name: "flaky", Attempts: i, StartedAt: epoch,
				Error: &store.ErrorInfo{Message: msg}}},
			Attempts: []store.Attempt{{Position: 0, Attempt: i, Error: store.ErrorInfo{Message: msg, Type: "io"},
				StartedAt: started, FinishedAt: finished}},
		})
	}
	ops := e.history(cr.Run.ID)
	if len(ops) != 1 || len(ops[0].AttemptLog) != 3 {
		t.Fatalf("history = %+v, want one op with 3 attempts", ops)
	}
	for i, a := range ops[0].AttemptLog {
		if a.Position != 0 || a.Attempt != i+1 || a.Error.Message != want[i] || a.Error.Type != "io" {
			t.Fatalf("attempt %d = %+v, want attempt %d: %q", i, a, i+1, want[i])
		}
		wantTime(t, "attempt StartedAt", a.StartedAt, epoch.Add(time.Duration(i)*time.Second))
		wantTime(t, "attempt FinishedAt", a.FinishedAt, epoch.Add(time.Duration(i+1)*time.Second))
	}
}

func checkpointKV(t *testing.T, e *env) {
	cr := e.start()
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, KV: []store.KVWrite{
		{Key: "a", Value: []byte("1")}, {Key: "b", Value: []byte("2")},
		{Key: "a", Value: []byte("3")}, {Key: "b", Delete: true}, {Key: "c", Delete: true},
		{Key: "d", Delete: true}, {Key: "d", Value: []byte("4")},
	}})
	e.wantKV(cr.Run.ID, "a", "3")
	e.wantKV(cr.Run.ID, "d", "4")
	for _, k := range []string{"b", "c"} {
		_, err := e.kvGet(cr.Run.ID, k)
		wantErr(t, "KVGet("+k+")", err, store.ErrKeyNotFound)
	}
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusSucceeded, KV: []store.KVWrite{
		{Key: "a", Delete: true}, {Key: "b", Value: []byte("5")},
	}})
	_, err := e.kvGet(cr.Run.ID, "a")
	wantErr(t, "KVGet(a) after delete", err, store.ErrKeyNotFound)
	e.wantKV(cr.Run.ID, "b", "5")
	e.wantKV(cr.Run.ID, "d", "4")
}

func checkpointRunning(t *testing.T, e *env) {
	cr := e.start()
	for i := range 3 {
		e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{e.doneStep(i, "s", `1`)}})
	}
	if r := e.wantStatus(cr.Run.ID, store.StatusRunning); r.LeaseOwner != worker || r.Attempts != 1 {
		t.Fatalf("run = %+v, want still leased by %s, attempt 1", r, worker)
	}
	e.wantNoClaim(claimBy("worker-2"))
	if ops := e.history(cr.Run.ID); len(ops) != 3 {
		t.Fatalf("history = %v, want 3 ops", opPositions(ops))
	}
}

func checkpointWaiting(t *testing.T, e *env) {
	cr := e.start()
	wake := e.clk.Now().Add(time.Minute)
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "sleep", WakeAt: &wake})
	r := e.wantStatus(cr.Run.ID, store.StatusWaiting)
	if r.WaitReason != "sleep" {
		t.Fatalf("WaitReason = %q, want sleep", r.WaitReason)
	}
	err := e.checkpointErr(cr, store.CheckpointParams{Status: store.StatusRunning})
	wantErr(t, "Checkpoint after the run went waiting", err, store.ErrLeaseLost)
	e.clk.Advance(time.Minute - time.Microsecond)
	e.wantNoClaim()
	e.clk.Advance(time.Microsecond)
	e.claimOne(cr.Run.ID)
}

func checkpointBlocked(t *testing.T, e *env) {
	cr := e.start()
	e.block(cr)
	r := e.wantStatus(cr.Run.ID, store.StatusBlocked)
	if r.WaitReason != "non_determinism" || r.Error == nil || r.Error.Type != "non_determinism" ||
		r.Error.Message != "position 0: recorded step a, code asked for step b" {
		t.Fatalf("blocked run = %+v (error %+v), want its reason and error recorded", r, r.Error)
	}
	e.clk.Advance(24 * time.Hour)
	e.wantNoClaim()
	if _, err := e.st.RunResume(e.ctx, &store.RunResumeParams{Namespace: ns, Ref: cr.Run.ID}); err != nil {
		t.Fatalf("RunResume: %v", err)
	}
	e.claimOne(cr.Run.ID)
}

func checkpointPending(t *testing.T, e *env) {
	cr := e.start()
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusPending, Ops: []*store.Op{e.doneStep(0, "s", `1`)}})
	e.wantStatus(cr.Run.ID, store.StatusPending)
	again := e.claimOne(cr.Run.ID)
	if again.LeaseToken <= cr.LeaseToken || len(again.History) != 1 {
		t.Fatalf("reclaimed: token %d (was %d), history %v", again.LeaseToken, cr.LeaseToken, opPositions(again.History))
	}
	err := e.checkpointErr(cr, store.CheckpointParams{Status: store.StatusRunning})
	wantErr(t, "Checkpoint with the token handed back", err, store.ErrLeaseLost)
}

// wantFinished checks a run ended in status with its lease gone.
func (e *env) wantFinished(cr *store.ClaimedRun, status store.Status) *store.Run {
	e.t.Helper()
	r := e.wantStatus(cr.Run.ID, status)
	wantTimePtr(e.t, "FinishedAt", r.FinishedAt, e.clk.Now())
	err := e.checkpointErr(cr, store.CheckpointParams{Status: store.StatusRunning})
	wantErr(e.t, "Checkpoint after the run finished", err, store.ErrLeaseLost)
	e.clk.Advance(24 * time.Hour)
	e.wantNoClaim()
	if got := e.get(cr.Run.ID); got.Status != status {
		e.t.Fatalf("finished run changed to %s", got.Status)
	}
	return r
}

func checkpointSucceeded(t *testing.T, e *env) {
	cr := e.start()
	e.clk.Advance(time.Second)
	res := e.checkpoint(cr, store.CheckpointParams{Status: store.StatusSucceeded, Output: []byte(`{"ok":true}`)})
	got := e.get(cr.Run.ID)
	wantTime(t, "CheckpointResult.At", res.At, e.clk.Now())
	wantTime(t, "UpdatedAt", got.UpdatedAt, res.At)
	wantTimePtr(t, "FinishedAt", got.FinishedAt, res.At)
	r := e.wantFinished(cr, store.StatusSucceeded)
	if !bytes.Equal(r.Output, []byte(`{"ok":true}`)) || r.Error != nil {
		t.Fatalf("succeeded run: output %q, error %+v", r.Output, r.Error)
	}
}

func checkpointFailed(t *testing.T, e *env) {
	cr := e.start()
	e.clk.Advance(time.Second)
	fail := &store.ErrorInfo{Message: "boom", Type: "*app.Err", NonRetryable: true}
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusFailed, Error: fail})
	r := e.wantFinished(cr, store.StatusFailed)
	if r.Error == nil || *r.Error != *fail {
		t.Fatalf("failed run error = %+v, want %+v", r.Error, fail)
	}
}

func checkpointCancelled(t *testing.T, e *env) {
	cr := e.start()
	e.clk.Advance(time.Second)
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusCancelled,
		Error: &store.ErrorInfo{Message: "run cancelled", Type: "cancelled"}})
	r := e.wantFinished(cr, store.StatusCancelled)
	if r.Error == nil || r.Error.Type != "cancelled" {
		t.Fatalf("cancelled run error = %+v", r.Error)
	}
}

func checkpointInvalidStatus(t *testing.T, e *env) {
	cr := e.start()
	for _, s := range []store.Status{"", "done", "RUNNING"} {
		p := e.everything()
		p.Status = s
		err := e.checkpointErr(cr, p)
		wantErr(t, fmt.Sprintf("Checkpoint with status %q", s), err, store.ErrInvalidParams)
	}
	e.wantUntouched(cr.Run.ID)
	e.wantStatus(cr.Run.ID, store.StatusRunning)
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning})
}

func checkpointConcurrent(t *testing.T, e *env) {
	const n = 50
	for range n {
		e.create()
	}
	crs := e.claim(claimMax(n)).Runs
	if len(crs) != n {
		t.Fatalf("claimed %d runs, want %d", len(crs), n)
	}
	// Hand the first run back and claim it again: its first token is now stale.
	stale := crs[0]
	if err := e.st.LeaseRelease(e.ctx, &store.LeaseReleaseParams{Lease: stale.Lease()}); err != nil {
		t.Fatalf("LeaseRelease: %v", err)
	}
	e.claimOne(stale.Run.ID)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, cr := range crs {
		wg.Go(func() {
			p := e.everything()
			p.Lease = cr.Lease()
			_, errs[i] = e.st.Checkpoint(e.ctx, &p)
		})
	}
	wg.Wait()
	wantErr(t, "concurrent Checkpoint with the stale token", errs[0], store.ErrLeaseLost)
	e.wantUntouched(stale.Run.ID)
	e.wantStatus(stale.Run.ID, store.StatusRunning)
	if err := errors.Join(errs[1:]...); err != nil {
		t.Fatalf("concurrent checkpoints failed: %v", err)
	}
	for _, cr := range crs[1:] {
		e.wantStatus(cr.Run.ID, store.StatusSucceeded)
		e.wantKV(cr.Run.ID, "k", `"v"`)
	}
}
