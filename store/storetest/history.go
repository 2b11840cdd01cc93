package storetest

import (
	"bytes"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

var historyCases = []testCase{
	{"UnknownRun", historyUnknown},
	{"EmptyForNewRun", historyEmpty},
	{"RoundTripInPositionOrder", historyRoundTrip},
	{"SucceededAttempt", historySucceededAttempt},
	{"AttemptOutcomes", historyAttemptOutcomes},
}

// Attempt rows carry their outcome; a row written without one and with an
// error reads as failed (rows written before outcomes were); a write of an
// attempt that has a row replaces it (a started row by the attempt's end); a
// checkpoint or a seeded create with an unknown outcome is refused.
func historyAttemptOutcomes(t *testing.T, e *env) {
	cr := e.start()
	t0 := e.clk.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d * time.Second) }
	att := func(n int, outcome, msg string) store.Attempt {
		return store.Attempt{Position: 0, Attempt: n, Error: store.ErrorInfo{Message: msg},
			StartedAt: at(time.Duration(n - 1)), FinishedAt: at(time.Duration(n)), Outcome: outcome}
	}
	op := &store.Op{Position: 0, Kind: store.OpStep, Name: "charge", Attempts: 4, StartedAt: t0}
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{op},
		Attempts: []store.Attempt{att(1, "", "503"), att(2, store.AttemptLost, "lease expired"),
			att(3, store.AttemptTimedOut, "timed out"), att(4, store.AttemptStarted, "")}})
	got := e.history(cr.Run.ID)
	want := []string{store.AttemptFailed, store.AttemptLost, store.AttemptTimedOut, store.AttemptStarted}
	if len(got) != 1 || len(got[0].AttemptLog) != len(want) {
		t.Fatalf("history = %+v, want 4 attempts", got)
	}
	for i, a := range got[0].AttemptLog {
		if a.Attempt != i+1 || a.Outcome != want[i] {
			t.Errorf("attempt %d = %+v, want outcome %q", i+1, a, want[i])
		}
	}
	// The started attempt ends: its row is replaced, not added to.
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{op},
		Attempts: []store.Attempt{att(4, store.AttemptFailed, "declined")}})
	got = e.history(cr.Run.ID)
	if n := len(got[0].AttemptLog); n != 4 || got[0].AttemptLog[3].Outcome != store.AttemptFailed ||
		got[0].AttemptLog[3].Error.Message != "declined" {
		t.Fatalf("attempt log after the started attempt failed = %+v, want its row replaced", got[0].AttemptLog)
	}
	// A started attempt that then completes the step: its row becomes the
	// completing attempt's (AttemptStartedAt), not a failure.
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{op},
		Attempts: []store.Attempt{att(5, store.AttemptStarted, "")}})
	fin, started := at(6), at(5)
	done := &store.Op{Position: 0, Kind: store.OpStep, Name: "charge", Done: true, Result: []byte(`1`), Attempts: 5,
		StartedAt: t0, FinishedAt: &fin, AttemptStartedAt: &started}
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{done}})
	got = e.history(cr.Run.ID)
	if len(got[0].AttemptLog) != 4 || got[0].AttemptStartedAt == nil {
		t.Fatalf("history after the step completed = %+v, want 4 attempts logged and AttemptStartedAt", got[0])
	}
	wantTimePtr(t, "AttemptStartedAt", got[0].AttemptStartedAt, started)
	// Bad outcomes change nothing.
	bad := store.CheckpointParams{Lease: cr.Lease(), Status: store.StatusRunning, Ops: []*store.Op{op},
		Attempts: []store.Attempt{att(6, "exploded", "x")}}
	_, err := e.st.Checkpoint(e.ctx, &bad)
	wantErr(t, "Checkpoint with an unknown outcome", err, store.ErrInvalidParams)
	if got := e.history(cr.Run.ID); len(got[0].AttemptLog) != 4 || !got[0].Done {
		t.Fatalf("a refused checkpoint changed the history: %+v", got[0])
	}
	seed := &store.Op{Position: 0, Kind: store.OpStep, Name: "charge", Done: true, Attempts: 2, StartedAt: t0,
		FinishedAt: &fin, AttemptLog: []store.Attempt{att(1, "weird", "x")}}
	p := e.params()
	p.History = []*store.Op{seed}
	_, err = e.st.RunCreate(e.ctx, p)
	wantErr(t, "RunCreate with a history holding an unknown outcome", err, store.ErrInvalidParams)
	if runs := e.runsGet(store.RunsGetParams{Namespace: ns, IDs: []string{p.ID}}); len(runs) != 0 {
		t.Fatalf("a refused seeded create made a run: %+v", runs)
	}
}

// A step that succeeded at its third attempt: its failed attempts are its log,
// and the row of the one that succeeded (store.Op.SucceededAttempt, which the
// store writes from the op's AttemptStartedAt) is read back as
// AttemptStartedAt, not as a failure. A step that failed for good
// keeps its last attempt in the log.
func historySucceededAttempt(t *testing.T, e *env) {
	cr := e.start()
	t0 := e.clk.Now()
	at := func(d time.Duration) time.Time { return t0.Add(d * time.Second) }
	fin := at(5)
	third := at(4)
	fail := func(pos, n int) store.Attempt { // attempt n ran from second n-1 to second n
		return store.Attempt{Position: pos, Attempt: n, Error: store.ErrorInfo{Message: "503"},
			StartedAt: at(time.Duration(n - 1)), FinishedAt: at(time.Duration(n))}
	}
	ok := &store.Op{Position: 0, Kind: store.OpStep, Name: "charge", Done: true, Result: []byte(`1`), Attempts: 3,
		StartedAt: t0, FinishedAt: &fin, AttemptStartedAt: &third}
	row, has := ok.SucceededAttempt()
	if !has || row.Attempt != 3 || row.Error.Message != "" || !row.StartedAt.Equal(third) {
		t.Fatalf("SucceededAttempt = %+v, %v", row, has)
	}
	failed := &store.Op{Position: 1, Kind: store.OpStep, Name: "refund", Done: true, Attempts: 2,
		Error: &store.ErrorInfo{Message: "503"}, StartedAt: t0, FinishedAt: &fin}
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{ok, failed},
		Attempts: []store.Attempt{fail(0, 1), fail(0, 2), fail(1, 1), fail(1, 2)}}) // the store writes row from ok
	got := e.history(cr.Run.ID)
	if len(got) != 2 || len(got[0].AttemptLog) != 2 || got[0].AttemptLog[1].Attempt != 2 {
		t.Fatalf("history = %+v, want the step's 2 failed attempts", got)
	}
	wantTimePtr(t, "AttemptStartedAt", got[0].AttemptStartedAt, third)
	if len(got[1].AttemptLog) != 2 || got[1].AttemptStartedAt != nil {
		t.Fatalf("failed step = %+v, want both attempts logged and no AttemptStartedAt", got[1])
	}
}

func historyUnknown(t *testing.T, e *env) {
	_, err := e.st.HistoryList(e.ctx, &store.HistoryListParams{Namespace: ns, Ref: "nope"})
	wantErr(t, "HistoryList of an unknown run", err, store.ErrRunNotFound)
}

func historyEmpty(t *testing.T, e *env) {
	r := e.create()
	if ops := e.history(r.ID); len(ops) != 0 {
		t.Fatalf("history of a new run = %v, want empty", opPositions(ops))
	}
	cr := e.claimOne(r.ID)
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, KV: []store.KVWrite{{Key: "k", Value: []byte(`"v"`)}}})
	if ops := e.history(r.ID); len(ops) != 0 {
		t.Fatalf("history after a checkpoint without ops = %v, want empty", opPositions(ops))
	}
}

// historyOps returns one op of every kind at positions 0..6, and the failed attempts
// of the step at position 2.
func (e *env) historyOps() ([]*store.Op, []store.Attempt) {
	t0 := e.clk.Now()
	t1 := t0.Add(time.Second)
	op := func(pos int, kind store.OpKind, name, result string) *store.Op {
		return &store.Op{Position: pos, Kind: kind, Name: name, Done: true, Result: []byte(result),
			Attempts: 1, StartedAt: t0, FinishedAt: &t1}
	}
	ops := []*store.Op{
		op(0, store.OpNow, "now", `"2030-01-02T03:04:05Z"`),
		op(1, store.OpUUID, "uuid", `"0b6f…"`),
		op(2, store.OpStep, "charge", `{"id":"ch_1"}`),
		op(3, store.OpRandom, "random", `4`),
		op(4, store.OpPatch, "v2", `true`),
		op(5, store.OpSet, "k", ``),
		op(6, store.OpDelete, "k", ``),
	}
	ops[2].Attempts = 3
	fail := func(n int) store.Attempt {
		return store.Attempt{Position: 2, Attempt: n, Error: store.ErrorInfo{Message: "503"}, StartedAt: t0, FinishedAt: t1}
	}
	return ops, []store.Attempt{fail(1), fail(2)}
}

func historyRoundTrip(t *testing.T, e *env) {
	cr := e.start()
	want, attempts := e.historyOps()
	// Two checkpoints, each with ops out of position order.
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning,
		Ops: []*store.Op{want[4], want[0], want[2]}, Attempts: attempts})
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning,
		Ops: []*store.Op{want[6], want[5], want[1], want[3]}})
	got := e.history(cr.Run.ID)
	if len(got) != len(want) {
		t.Fatalf("history positions = %v, want 0..%d", opPositions(got), len(want)-1)
	}
	for i, w := range want {
		wantOp(t, got[i], w)
	}
	if len(got[2].AttemptLog) != 2 || got[2].AttemptLog[1].Attempt != 2 || got[2].AttemptLog[0].Error.Message != "503" {
		t.Fatalf("op 2 AttemptLog = %+v, want its 2 failed attempts", got[2].AttemptLog)
	}
	for _, op := range got {
		if op.Position != 2 && len(op.AttemptLog) != 0 {
			t.Fatalf("op %d has attempts %+v of another op", op.Position, op.AttemptLog)
		}
	}
}

func wantOp(t *testing.T, got, want *store.Op) {
	t.Helper()
	if got.Position != want.Position || got.Kind != want.Kind || got.Name != want.Name ||
		got.Done != want.Done || got.Attempts != want.Attempts || !bytes.Equal(got.Result, want.Result) ||
		(got.Error == nil) != (want.Error == nil) {
		t.Fatalf("op at %d = %+v, want %+v", want.Position, got, want)
	}
	wantTime(t, "op StartedAt", got.StartedAt, want.StartedAt)
	wantTimePtr(t, "op FinishedAt", got.FinishedAt, *want.FinishedAt)
}
