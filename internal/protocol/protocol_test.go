package protocol_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/protocol"
	"github.com/trellis-dev/trellis/store"
)

// TestGoldenHistoriesAreValid: the histories the Go engine recorded, kept as
// trellistest's golden files, are valid by the protocol's rules.
func TestGoldenHistoriesAreValid(t *testing.T) {
	files, err := filepath.Glob("../../trellistest/testdata/replay/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden histories (%v)", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var h struct {
			Ops []struct {
				store.Op
				Result json.RawMessage `json:"result"`
			} `json:"ops"`
		}
		if err := json.Unmarshal(b, &h); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		ops := make([]*store.Op, len(h.Ops))
		for i, o := range h.Ops {
			op := o.Op
			if len(o.Result) > 0 && string(o.Result) != "null" {
				op.Result = o.Result
			}
			ops[i] = &op
		}
		if err := protocol.CheckHistory(ops); err != nil {
			t.Errorf("%s: %v", filepath.Base(f), err)
		}
	}
}

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

func tp(t time.Time) *time.Time { return &t }

// valid is a checkpoint of a run's first execution that records one of most
// kinds of op, with what goes with each.
func valid() *store.CheckpointParams {
	return &store.CheckpointParams{
		Lease:  store.Lease{Namespace: "default", RunID: "r1", Token: 7, Queue: "default"},
		Status: store.StatusRunning,
		Ops: []*store.Op{
			{Position: 0, Kind: store.OpStep, Name: "charge", Done: true, Result: []byte(`{"id":1}`), Attempts: 2, StartedAt: t0, FinishedAt: tp(t0.Add(time.Second)), AttemptStartedAt: tp(t0.Add(time.Second / 2))},
			{Position: 1, Kind: store.OpNow, Done: true, Result: []byte(`"2030-01-01T00:00:01Z"`), Attempts: 1, StartedAt: t0},
			{Position: 2, Kind: store.OpUUID, Done: true, Result: []byte(`"0195a0b1-7c2d-4e3f-8a9b-0c1d2e3f4a5b"`), Attempts: 1, StartedAt: t0},
			{Position: 3, Kind: store.OpRandom, Done: true, Result: []byte(`18446744073709551615`), Attempts: 1, StartedAt: t0},
			{Position: 4, Kind: store.OpSet, Name: "k", Done: true, Result: []byte(`1`), Attempts: 1, StartedAt: t0},
			{Position: 5, Kind: store.OpEmit, Name: "progress", Done: true, Attempts: 1, StartedAt: t0},
			{Position: 6, Kind: store.OpChild, Name: "double", Result: []byte(`{"run_id":"r1.6"}`), Attempts: 1, StartedAt: t0},
			{Position: 7, Kind: store.OpApproval, Name: "boss", Result: []byte(`{"id":"r1.approval.7"}`), Attempts: 1, StartedAt: t0},
			{Position: 8, Kind: store.OpTimer, Result: []byte(`"2030-01-01T01:00:00Z"`), Attempts: 1, StartedAt: t0},
		},
		Attempts: []store.Attempt{{Position: 0, Attempt: 1, Error: store.ErrorInfo{Message: "declined"}, StartedAt: t0, FinishedAt: t0.Add(time.Second / 4)}},
		KV:       []store.KVWrite{{Key: "k", Value: []byte(`1`)}},
		Stream: []store.StreamWrite{
			{Name: store.StreamRunStarted, Data: []byte(`{"attempt":1,"workflow":"w"}`)},
			{Name: store.StreamStepFailed, Data: []byte(`{"name":"charge","attempt":1,"duration_ms":250}`)},
			{Name: store.StreamStepCompleted, Data: []byte(`{"name":"charge","attempt":2,"duration_ms":500}`)},
			{Name: "progress", Data: []byte(`{"pct":50}`)},
		},
		Children:  []*store.ChildGroup{{Position: 6, Runs: []*store.RunCreateParams{{ID: "r1.6", Workflow: "double"}}}},
		Approvals: []*store.ApprovalRequest{{ID: "r1.approval.7", Position: 7, Name: "boss"}},
	}
}

func TestCheckAcceptsValid(t *testing.T) {
	if err := protocol.Check(valid(), protocol.NewRecorded(nil, false)); err != nil {
		t.Fatal(err)
	}
	// Completing recorded ops in progress, with the run ending.
	rec := protocol.NewRecorded([]*store.Op{
		{Position: 0, Kind: store.OpStep, Name: "a", Done: true, Attempts: 1},
		{Position: 1, Kind: store.OpEvent, Name: "go", Attempts: 1},
	}, false)
	p := &store.CheckpointParams{Status: store.StatusSucceeded, Output: []byte(`"ok"`),
		Ops:    []*store.Op{{Position: 1, Kind: store.OpEvent, Name: "go", Done: true, Result: []byte(`"green"`), Attempts: 1, StartedAt: t0, FinishedAt: &t0}},
		Stream: []store.StreamWrite{store.FinalEvent(store.StatusSucceeded, []byte(`"ok"`), nil)}}
	if err := protocol.Check(p, rec); err != nil {
		t.Fatal(err)
	}
	// The same done op again (a checkpoint retried through another server):
	// accepted; the store answers it as applied.
	done := &store.Op{Position: 0, Kind: store.OpStep, Name: "a", Done: true, Result: []byte(`7`), Attempts: 1, StartedAt: t0, FinishedAt: &t0}
	if err := protocol.Check(&store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{done}},
		protocol.NewRecorded([]*store.Op{done}, false)); err != nil {
		t.Fatalf("an identical rewrite: %v", err)
	}
	// An at-most-once step's started attempt: the op in progress at that
	// attempt, with what preceded it. The attempt's end replaces the row: a
	// failed one, or the step done with its attempt_started_at (at attempt 1
	// too).
	started := &store.CheckpointParams{Status: store.StatusRunning,
		Ops: []*store.Op{{Position: 1, Kind: store.OpStep, Name: "pay", Attempts: 1, StartedAt: t0}},
		Attempts: []store.Attempt{{Position: 1, Attempt: 1, Outcome: store.AttemptStarted,
			Error: store.ErrorInfo{Message: "the attempt started; its outcome was not recorded"}, StartedAt: t0, FinishedAt: t0}}}
	amo := protocol.NewRecorded([]*store.Op{{Position: 0, Kind: store.OpStep, Name: "a", Done: true, Attempts: 1}}, false)
	if err := protocol.Check(started, amo); err != nil {
		t.Fatalf("a started attempt: %v", err)
	}
	amo.Apply(started)
	paid := &store.CheckpointParams{Status: store.StatusRunning,
		Ops:    []*store.Op{{Position: 1, Kind: store.OpStep, Name: "pay", Done: true, Result: []byte(`1`), Attempts: 1, StartedAt: t0, FinishedAt: tp(t0.Add(time.Second)), AttemptStartedAt: &t0}},
		Stream: []store.StreamWrite{{Name: store.StreamStepCompleted, Data: []byte(`{"name":"pay","attempt":1,"duration_ms":1000}`)}}}
	if err := protocol.Check(paid, amo); err != nil {
		t.Fatalf("an at-most-once step done at its first attempt: %v", err)
	}
	// Its outcome unknown after a crash: done with the error, no attempt row.
	unknown := &store.CheckpointParams{Status: store.StatusRunning,
		Ops: []*store.Op{{Position: 1, Kind: store.OpStep, Name: "pay", Done: true, Attempts: 1, StartedAt: t0, FinishedAt: &t0,
			Error: &store.ErrorInfo{Message: "step outcome unknown: …", Type: "step_outcome_unknown", NonRetryable: true}}},
		Stream: []store.StreamWrite{{Name: store.StreamStepFailed, Data: []byte(`{"name":"pay","attempt":1,"duration_ms":0,"final":true}`)}}}
	if err := protocol.Check(unknown, amo); err != nil {
		t.Fatalf("an unknown outcome: %v", err)
	}
	// A timer recorded in progress and completed in the same checkpoint (it
	// was due already): the later write completes the earlier.
	p = &store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{
		{Position: 2, Kind: store.OpTimer, Result: []byte(`"2030-01-01T00:00:00Z"`), Attempts: 1, StartedAt: t0},
		{Position: 2, Kind: store.OpTimer, Done: true, Result: []byte(`"2030-01-01T00:00:00Z"`), Attempts: 1, StartedAt: t0, FinishedAt: &t0},
	}}
	if err := protocol.Check(p, rec); err != nil {
		t.Fatal(err)
	}
	// An approval requested and timed out in the same checkpoint (its
	// timeout passed before the checkpoint was made): the request goes with
	// the op's first write, in progress, which the second completes.
	p = &store.CheckpointParams{Lease: store.Lease{RunID: "r1"}, Status: store.StatusRunning, Ops: []*store.Op{
		{Position: 3, Kind: store.OpApproval, Name: "boss", Result: []byte(`{"id":"r1.approval.3"}`), Attempts: 1, StartedAt: t0},
		{Position: 3, Kind: store.OpApproval, Name: "boss", Done: true, Error: &store.ErrorInfo{Message: "approval timed out: boss", Type: "approval_timeout"},
			Attempts: 1, StartedAt: t0, FinishedAt: &t0},
	}, Approvals: []*store.ApprovalRequest{{ID: "r1.approval.3", Position: 3, Name: "boss"}}, ExpireApprovals: []string{"r1.approval.3"}}
	if err := protocol.Check(p, rec); err != nil {
		t.Fatalf("an approval requested and timed out in one checkpoint: %v", err)
	}
	// A failure that carries the workflow's retry policy.
	boom := &store.ErrorInfo{Message: "boom"}
	failed := &store.CheckpointParams{Status: store.StatusFailed, Error: boom, Retry: &store.RunRetry{MaxAttempts: 3},
		Stream: []store.StreamWrite{store.FinalEvent(store.StatusFailed, nil, boom)}}
	if err := protocol.Check(failed, rec); err != nil {
		t.Fatalf("a failure with a retry policy: %v", err)
	}
	failed.Retry = &store.RunRetry{MaxAttempts: 0}
	if err := protocol.Check(failed, rec); !errors.Is(err, store.ErrInvalidParams) || !strings.Contains(err.Error(), "retry: retry.max_attempts must be from 1") {
		t.Fatalf("a failure with a bad retry policy: %v", err)
	}
	// A workflow retry's next attempt writes the failed step it made in
	// progress again, numbering its attempts on.
	retried := protocol.NewRecorded([]*store.Op{{Position: 0, Kind: store.OpStep, Name: "charge", Attempts: 2, StartedAt: t0}}, false)
	p = &store.CheckpointParams{Status: store.StatusRunning,
		Ops: []*store.Op{{Position: 0, Kind: store.OpStep, Name: "charge", Done: true, Result: []byte(`1`), Attempts: 3,
			StartedAt: t0, FinishedAt: &t0, AttemptStartedAt: &t0}},
		Stream: []store.StreamWrite{{Name: "run.resumed", Data: []byte(`{"attempt":2,"replayed":1}`)},
			{Name: "step.completed", Data: []byte(`{"name":"charge","attempt":3,"duration_ms":1}`)}}}
	if err := protocol.Check(p, retried); err != nil {
		t.Fatalf("a retried step's next attempt: %v", err)
	}
}

// TestCheckRefuses: each way of breaking the rules is refused as invalid
// params, naming the op or field.
func TestCheckRefuses(t *testing.T) {
	rec := func() *protocol.Recorded {
		return protocol.NewRecorded([]*store.Op{
			{Position: 0, Kind: store.OpStep, Name: "a", Done: true, Attempts: 1},
			{Position: 1, Kind: store.OpEvent, Name: "go", Attempts: 1},
		}, false)
	}
	op := func(p *store.CheckpointParams, i int) *store.Op { return p.Ops[i] }
	cases := []struct {
		name  string
		edit  func(p *store.CheckpointParams)
		after bool // checked against rec() (a run with history)
		want  string
	}{
		{"unknown kind", func(p *store.CheckpointParams) { op(p, 1).Kind = "sleep" }, false, `op 1 (position 1, sleep) kind: unknown op kind "sleep"`},
		{"no kind", func(p *store.CheckpointParams) { op(p, 1).Kind = "" }, false, `unknown op kind ""`},
		{"step without name", func(p *store.CheckpointParams) { op(p, 0).Name = "" }, false, "op 0 (position 0, step) name: a step op needs a name"},
		{"named now", func(p *store.CheckpointParams) { op(p, 1).Name = "x" }, false, `a now op has no name`},
		{"negative position", func(p *store.CheckpointParams) { op(p, 1).Position = -1 }, false, "position: must be from 0"},
		{"twice in a checkpoint", func(p *store.CheckpointParams) { op(p, 2).Position = 1 }, false, "written twice in one checkpoint"},
		{"negative attempts", func(p *store.CheckpointParams) { op(p, 0).Attempts = -1 }, false, "attempts: must be at least 0"},
		{"done step without attempt or error", func(p *store.CheckpointParams) {
			o := op(p, 0)
			o.Attempts, o.AttemptStartedAt, p.Attempts = 0, nil, nil
			p.Stream = append(p.Stream[:1], p.Stream[2:]...)
		}, false, "a step done without an attempt has the error"},
		{"now with two attempts", func(p *store.CheckpointParams) { op(p, 1).Attempts = 2 }, false, "a now op has 1 attempt"},
		{"now in progress", func(p *store.CheckpointParams) { op(p, 1).Done = false }, false, "a now op is written done"},
		{"result on a delete", func(p *store.CheckpointParams) {
			op(p, 4).Kind, p.KV[0] = store.OpDelete, store.KVWrite{Key: "k", Delete: true}
		}, false, "op 4 (position 4, delete \"k\") result: has no result"},
		{"result on an emit", func(p *store.CheckpointParams) { op(p, 5).Result = []byte(`1`) }, false, "emit \"progress\") result: has no result"},
		{"result on a step in progress", func(p *store.CheckpointParams) {
			o := op(p, 0)
			o.Done, o.FinishedAt, o.AttemptStartedAt = false, nil, nil
			p.Stream = p.Stream[:2]
			p.Stream = append(p.Stream, store.StreamWrite{Name: "progress", Data: []byte(`1`)})
		}, false, "a step in progress has no result"},
		{"error on a now", func(p *store.CheckpointParams) { op(p, 1).Error = &store.ErrorInfo{Message: "x"} }, false, "a now op has no error"},
		{"now not a time", func(p *store.CheckpointParams) { op(p, 1).Result = []byte(`"yesterday"`) }, false, "must be an RFC 3339 time"},
		{"uuid not a uuid", func(p *store.CheckpointParams) { op(p, 2).Result = []byte(`"x"`) }, false, "UUID"},
		{"random negative", func(p *store.CheckpointParams) { op(p, 3).Result = []byte(`-1`) }, false, "JSON integer from 0 to 2^64-1"},
		{"random too big", func(p *store.CheckpointParams) { op(p, 3).Result = []byte(`18446744073709551616`) }, false, "2^64-1"},
		{"timer without due time", func(p *store.CheckpointParams) { op(p, 8).Result = nil }, false, "op 8 (position 8, timer) result"},
		{"attempt_log written", func(p *store.CheckpointParams) { op(p, 0).AttemptLog = []store.Attempt{{Attempt: 1}} }, false, "attempt_log: read only"},
		{"rewrite a done op", func(p *store.CheckpointParams) {
			p.Ops, p.KV, p.Stream, p.Children, p.Approvals, p.Attempts = []*store.Op{{Position: 0, Kind: store.OpStep, Name: "a", Done: true, Result: []byte(`2`), Attempts: 1, StartedAt: t0, FinishedAt: &t0}}, nil, nil, nil, nil, nil
		}, true, `op 0 (position 0, step "a") position: rewrites the op recorded there (step "a"), which is done`},
		{"another op at a recorded position", func(p *store.CheckpointParams) {
			p.Ops, p.KV, p.Stream, p.Children, p.Approvals, p.Attempts = []*store.Op{{Position: 1, Kind: store.OpEvent, Name: "stop", Done: true, Attempts: 1, StartedAt: t0, FinishedAt: &t0}}, nil, nil, nil, nil, nil
		}, true, `the op recorded there is event "go"`},
		{"skip ahead", func(p *store.CheckpointParams) {
			p.Ops, p.KV, p.Stream, p.Children, p.Approvals, p.Attempts = []*store.Op{{Position: 1 << 20, Kind: store.OpNow, Done: true, Result: []byte(`"2030-01-01T00:00:00Z"`), Attempts: 1, StartedAt: t0}}, nil, nil, nil, nil, nil
		}, true, "skips ahead: the highest recorded position is 1"},
		{"attempt without its op", func(p *store.CheckpointParams) { p.Attempts[0].Position = 9 }, false, "attempts[0]: position 9"},
		{"attempt beyond the op's", func(p *store.CheckpointParams) { p.Attempts[0].Attempt = 3 }, false, "attempt 3 of a step at attempt 2"},
		{"attempt without error", func(p *store.CheckpointParams) { p.Attempts[0].Error.Message = "" }, false, "needs its error's message"},
		{"started attempt of a done step", func(p *store.CheckpointParams) {
			p.Attempts[0].Attempt, p.Attempts[0].Outcome = 2, store.AttemptStarted
		}, false,
			"a started attempt goes with its step in progress at that attempt (done false, attempts 2), not done"},
		{"started attempt before the step's last", func(p *store.CheckpointParams) {
			op(p, 0).Done, op(p, 0).Result, op(p, 0).FinishedAt, op(p, 0).AttemptStartedAt = false, nil, nil, nil
			p.Attempts[0].Outcome = store.AttemptStarted
		}, false, "a started attempt goes with its step in progress at that attempt (done false, attempts 1), not in progress at attempt 2"},
		{"kv without op", func(p *store.CheckpointParams) { p.KV = append(p.KV, store.KVWrite{Key: "z", Value: []byte(`1`)}) }, false, `kv[1]: run-store write of key "z" without its set or delete op`},
		{"set without kv", func(p *store.CheckpointParams) { p.KV = nil }, false, `set "k") kv: has no run-store write`},
		{"set with another value", func(p *store.CheckpointParams) { p.KV[0].Value = []byte(`2`) }, false, "a set op's write sets the op's result"},
		{"emit with a reserved name", func(p *store.CheckpointParams) { op(p, 5).Name, p.Stream[3].Name = "run.succeeded", "run.succeeded" }, false, "names starting with run. or step. are reserved"},
		{"event without emit op", func(p *store.CheckpointParams) {
			p.Stream = append(p.Stream, store.StreamWrite{Name: "extra", Data: []byte(`1`)})
		}, false, `stream[4]: event "extra" has no emit op`},
		{"emit without event", func(p *store.CheckpointParams) { p.Stream = p.Stream[:3] }, false, "an emit op needs its event"},
		{"emit of another name", func(p *store.CheckpointParams) { p.Stream[3].Name = "other" }, false, `the emit op's event is "progress", not "other"`},
		{"unknown lifecycle name", func(p *store.CheckpointParams) {
			p.Stream[3] = store.StreamWrite{Name: "run.hacked", Data: []byte(`{}`)}
		}, false, `"run.hacked" is not a lifecycle event`},
		{"run.succeeded while running", func(p *store.CheckpointParams) {
			p.Stream = append(p.Stream, store.FinalEvent(store.StatusSucceeded, []byte(`1`), nil))
		}, false, "run.succeeded goes with status succeeded"},
		{"run.started not first", func(p *store.CheckpointParams) { p.Stream[0], p.Stream[1] = p.Stream[1], p.Stream[0] }, false, "run.started is the first event"},
		{"step.completed of no step", func(p *store.CheckpointParams) { p.Stream[2].Data = []byte(`{"name":"refund"}`) }, false, `step.completed of step "refund" without a completed step op`},
		{"lifecycle data not an object", func(p *store.CheckpointParams) { p.Stream[2].Data = []byte(`"x"`) }, false, "its data is a JSON object"},
		{"child group without op", func(p *store.CheckpointParams) { p.Children[0].Position = 3 }, false, "children[0]: position 3: a child group goes with its child op"},
		{"child of another workflow", func(p *store.CheckpointParams) { p.Children[0].Runs[0].Workflow = "other" }, false, `run 0 is of workflow "other", not the op's "double"`},
		{"child with a chosen ID", func(p *store.CheckpointParams) { p.Children[0].Runs[0].ID = "victim" }, false, `run 0 has ID "victim"`},
		{"approval without op", func(p *store.CheckpointParams) { p.Approvals[0].Position = 6 }, false, "approvals[0]: position 6"},
		{"approval of an op only done", func(p *store.CheckpointParams) {
			o := op(p, 7)
			o.Done, o.FinishedAt, o.Result, o.Error = true, &t0, nil, &store.ErrorInfo{Message: "approval timed out: boss", Type: "approval_timeout"}
		}, false, "approvals[0]: position 7: an approval request goes with its approval op, in progress"},
		{"retry policy while running", func(p *store.CheckpointParams) { p.Retry = &store.RunRetry{MaxAttempts: 2} }, false, "retry: goes only with status failed"},
		{"approval with a chosen ID", func(p *store.CheckpointParams) { p.Approvals[0].ID = "victim.approval.7" }, false, `request ID "victim.approval.7": an approval request's ID is r1.approval.7`},
		{"final event not last", func(p *store.CheckpointParams) {
			p.Status, p.Output = store.StatusSucceeded, []byte(`1`)
			p.Stream = append([]store.StreamWrite{p.Stream[0], store.FinalEvent(store.StatusSucceeded, []byte(`1`), nil)}, p.Stream[1:]...)
		}, false, "run.succeeded is the checkpoint's last event"},
		{"unknown status", func(p *store.CheckpointParams) { p.Status = "done" }, false, `status: "done" is not a status a worker writes`},
		{"running with output", func(p *store.CheckpointParams) { p.Output = []byte(`1`) }, false, "status: running: no output or error"},
		{"waiting without wake", func(p *store.CheckpointParams) { p.Status = store.StatusWaiting }, false, "needs wake_at or wait_events"},
		{"failed without error", func(p *store.CheckpointParams) { p.Status = store.StatusFailed }, false, "failed: needs the run's error"},
		{"blocked without error", func(p *store.CheckpointParams) { p.Status = store.StatusBlocked }, false, "needs the error that blocks the run"},
		{"succeeded with error", func(p *store.CheckpointParams) {
			p.Status, p.Error = store.StatusSucceeded, &store.ErrorInfo{Message: "x"}
		}, false, "no error and no wait"},
		{"cancelled without a request", func(p *store.CheckpointParams) {
			p.Ops, p.KV, p.Stream, p.Children, p.Approvals, p.Attempts = nil, nil, nil, nil, nil, nil
			p.Status, p.Error = store.StatusCancelled, &store.ErrorInfo{Message: "run cancelled", Type: "cancelled"}
		}, true, "the run's cancellation was not requested"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := valid()
			c.edit(p)
			r := protocol.NewRecorded(nil, false)
			if c.after {
				r = rec()
			}
			err := protocol.Check(p, r)
			var pe *protocol.Error
			if err == nil || !errors.Is(err, store.ErrInvalidParams) || !errors.As(err, &pe) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an invalid-params error with %q", err, c.want)
			}
		})
	}
}

// FuzzCheck: whatever a worker sends, Check answers without panicking, and a
// checkpoint it accepts leaves a history that is valid by CheckHistory.
func FuzzCheck(f *testing.F) {
	seed, _ := json.Marshal(valid())
	f.Add(seed, false)
	f.Add([]byte(`{"status":"running","ops":[{"position":0,"kind":"step","name":"a","attempts":1,"started_at":"2030-01-01T00:00:00Z"}]}`), true)
	f.Add([]byte(`{"status":"waiting","wake_at":"2030-01-01T00:00:00Z","ops":[{"position":2,"kind":"timer","result":"IjIwMzAtMDEtMDFUMDA6MDA6MDBaIg==","attempts":1,"started_at":"2030-01-01T00:00:00Z"}],"stream":[{"name":"run.waiting","data":"e30="}]}`), true)
	f.Fuzz(func(t *testing.T, data []byte, withHistory bool) {
		var p store.CheckpointParams
		if json.Unmarshal(data, &p) != nil {
			return
		}
		var rec *protocol.Recorded
		var history []*store.Op
		if withHistory {
			history = []*store.Op{{Position: 0, Kind: store.OpStep, Name: "a", Done: true, Attempts: 1, StartedAt: t0}}
			rec = protocol.NewRecorded(history, false)
		}
		if protocol.Check(&p, rec) != nil {
			return
		}
		// Accepted: the history it leaves is valid.
		byPos := map[int]*store.Op{}
		for _, op := range history {
			byPos[op.Position] = op
		}
		for _, op := range p.Ops {
			c := *op
			byPos[op.Position] = &c
		}
		var ops []*store.Op
		for _, op := range byPos {
			ops = append(ops, op)
		}
		slices.SortFunc(ops, func(a, b *store.Op) int { return a.Position - b.Position })
		if err := protocol.CheckHistory(ops); err != nil {
			t.Fatalf("accepted %s, which leaves an invalid history: %v", data, err)
		}
	})
}

// BenchmarkCheckStep is the check of the commonest checkpoint: a step's
// result, with its lifecycle event, on a run with some history.
func BenchmarkCheckStep(b *testing.B) {
	rec := protocol.NewRecorded([]*store.Op{{Position: 0, Kind: store.OpStep, Name: "a", Done: true, Attempts: 1}}, false)
	p := &store.CheckpointParams{Status: store.StatusRunning,
		Ops: []*store.Op{{Position: 1, Kind: store.OpStep, Name: "b", Done: true, Result: []byte(`"` + strings.Repeat("x", 100) + `"`), Attempts: 1, StartedAt: t0, FinishedAt: &t0}},
		Stream: []store.StreamWrite{{Name: store.StreamRunResumed, Data: []byte(`{"attempt":2,"replayed":1}`)},
			{Name: store.StreamStepCompleted, Data: []byte(`{"name":"b","attempt":1,"duration_ms":0.012}`)}}}
	b.ReportAllocs()
	for b.Loop() {
		if err := protocol.Check(p, rec); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckLarge is the check of a large checkpoint built to make the
// rules slow: thousands of step events, steps and failed attempts, and emit
// ops out of position order. The check is linear in its size (it took 20 s
// when each step event scanned the ops and their attempts).
func BenchmarkCheckLarge(b *testing.B) {
	p := &store.CheckpointParams{Status: store.StatusRunning}
	const n = 2000
	for i := range n {
		p.Ops = append(p.Ops, &store.Op{Position: i, Kind: store.OpStep, Name: "s", Attempts: 2, StartedAt: t0})
		p.Attempts = append(p.Attempts, store.Attempt{Position: i, Attempt: 1, Error: store.ErrorInfo{Message: "x"}, StartedAt: t0, FinishedAt: t0})
		p.Stream = append(p.Stream, store.StreamWrite{Name: store.StreamStepFailed, Data: []byte(`{"name":"s"}`)})
	}
	for i := range 20 * n {
		p.Ops = append(p.Ops, &store.Op{Position: n + 20*n - i, Kind: store.OpEmit, Name: "e", Done: true, Attempts: 1, StartedAt: t0})
		p.Stream = append(p.Stream, store.StreamWrite{Name: "e", Data: []byte(`1`)})
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := protocol.Check(p, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// A step whose attempt the server recorded lost or timed out: the history is
// valid; the worker's next attempt is numbered after it (or the step fails at
// that count); a worker may not write those outcomes, nor renumber or rewrite
// the recorded attempt.
func TestCheckEndedAttempts(t *testing.T) {
	for _, outcome := range []string{store.AttemptLost, store.AttemptTimedOut} {
		recorded := &store.Op{Position: 0, Kind: store.OpStep, Name: "charge", Attempts: 1, StartedAt: t0,
			AttemptLog: []store.Attempt{{Position: 0, Attempt: 1, Outcome: outcome, StartedAt: t0, FinishedAt: t0.Add(time.Second),
				Error: store.ErrorInfo{Message: "attempt lost", Type: store.ErrorTypeAttemptLost}}}}
		if err := protocol.CheckHistory([]*store.Op{recorded}); err != nil {
			t.Fatalf("%s: a history with the recorded attempt: %v", outcome, err)
		}
		rec := func() *protocol.Recorded { return protocol.NewRecorded([]*store.Op{recorded}, false) }
		step := func(attempts int, done bool, err *store.ErrorInfo) *store.Op {
			op := &store.Op{Position: 0, Kind: store.OpStep, Name: "charge", Attempts: attempts, Done: done, Error: err, StartedAt: t0}
			if done {
				op.FinishedAt = tp(t0.Add(3 * time.Second))
				if err == nil {
					op.Result = []byte(`1`)
					op.AttemptStartedAt = tp(t0.Add(2 * time.Second))
				}
			}
			return op
		}
		failed := func(n int, outcome string) store.Attempt {
			return store.Attempt{Position: 0, Attempt: n, Outcome: outcome, StartedAt: t0.Add(2 * time.Second),
				FinishedAt: t0.Add(3 * time.Second), Error: store.ErrorInfo{Message: "503"}}
		}
		lease := store.Lease{Namespace: "default", RunID: "r1", Token: 8, Queue: "default"}
		ok := map[string]*store.CheckpointParams{
			"the next attempt succeeds": {Status: store.StatusRunning, Ops: []*store.Op{step(2, true, nil)}},
			"the next attempt fails":    {Status: store.StatusRunning, Ops: []*store.Op{step(2, false, nil)}, Attempts: []store.Attempt{failed(2, store.AttemptFailed)}},
			"the step fails with it":    {Status: store.StatusRunning, Ops: []*store.Op{step(1, true, &store.ErrorInfo{Message: "attempt lost"})}},
			"no outcome is failed":      {Status: store.StatusRunning, Ops: []*store.Op{step(2, false, nil)}, Attempts: []store.Attempt{failed(2, "")}},
		}
		for name, p := range ok {
			p.Lease = lease
			if err := protocol.Check(p, rec()); err != nil {
				t.Errorf("%s: %s: %v", outcome, name, err)
			}
		}
		bad := map[string]*store.CheckpointParams{
			"the same attempt again":    {Status: store.StatusRunning, Ops: []*store.Op{step(1, true, nil)}},
			"attempts going back":       {Status: store.StatusRunning, Ops: []*store.Op{step(0, true, &store.ErrorInfo{Message: "x"})}},
			"the ended attempt's row":   {Status: store.StatusRunning, Ops: []*store.Op{step(2, false, nil)}, Attempts: []store.Attempt{failed(1, store.AttemptFailed)}},
			"a worker's lost attempt":   {Status: store.StatusRunning, Ops: []*store.Op{step(2, false, nil)}, Attempts: []store.Attempt{failed(2, store.AttemptLost)}},
			"a worker's timed-out one":  {Status: store.StatusRunning, Ops: []*store.Op{step(2, false, nil)}, Attempts: []store.Attempt{failed(2, store.AttemptTimedOut)}},
			"an unknown outcome":        {Status: store.StatusRunning, Ops: []*store.Op{step(2, false, nil)}, Attempts: []store.Attempt{failed(2, "vanished")}},
			"the step in progress at 1": {Status: store.StatusRunning, Ops: []*store.Op{step(1, false, nil)}},
		}
		for name, p := range bad {
			p.Lease = lease
			if err := protocol.Check(p, rec()); err == nil {
				t.Errorf("%s: %s: accepted", outcome, name)
			}
		}
	}
}
