package storetest

import (
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/trellis-dev/trellis/store"
)

// Run streams: events appended by checkpoints (and by the store's own
// cancellation of a run that never started), numbered 1, 2, ... per run, read
// after a sequence, signalled on StreamTopic.
var streamCases = []testCase{
	{"AppendAndRead", streamAppendAndRead},
	{"StaleLeaseWritesNothing", streamStaleLease},
	{"CancelNeverStarted", streamCancelNeverStarted},
	{"FinalOnRead", streamFinalOnRead},
	{"BlockedCancelled", streamBlockedCancelled},
	{"ChildEnd", streamChildEnd},
	{"WaitingPath", streamWaitingPath},
	{"ConcurrentRuns", streamConcurrentRuns},
	{"Signal", streamSignal},
	{"BadInput", streamBadInput},
}

func sw(name, data string) store.StreamWrite {
	return store.StreamWrite{Name: name, Data: []byte(data)}
}

func (e *env) streamRead(runID string, after int64, limit int) *store.StreamReadResult {
	e.t.Helper()
	res, err := e.st.StreamRead(e.ctx, &store.StreamReadParams{Namespace: ns, RunID: runID, After: after, Limit: limit})
	if err != nil {
		e.t.Fatalf("StreamRead(%s, after %d): %v", runID, after, err)
	}
	return res
}

// wantStream fails unless the events of res are numbered from first on and named
// (and, for those given as name=data, valued) as want.
func wantStream(t *testing.T, res *store.StreamReadResult, first int64, want ...string) {
	t.Helper()
	var got []string
	for i, ev := range res.Events {
		if ev.Sequence != first+int64(i) {
			t.Fatalf("event %d has sequence %d, want %d", i, ev.Sequence, first+int64(i))
		}
		if ev.At.IsZero() {
			t.Fatalf("event %d has no time", ev.Sequence)
		}
		got = append(got, ev.Name+"="+string(ev.Data))
	}
	for i := range want {
		if !strings.Contains(want[i], "=") && i < len(got) {
			got[i], _, _ = strings.Cut(got[i], "=")
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("stream = %v, want %v", got, want)
	}
}

func streamAppendAndRead(t *testing.T, e *env) {
	cr := e.start()
	if res := e.streamRead(cr.Run.ID, 0, 0); len(res.Events) != 0 || res.Finished || res.Last != 0 {
		t.Fatalf("new run's stream = %+v, want empty and not finished", res)
	}
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning,
		Stream: []store.StreamWrite{sw("run.started", `{}`), sw("progress", `{"pct":10}`)}})
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning,
		Ops: []*store.Op{e.doneStep(0, "a", `1`)}, Stream: []store.StreamWrite{sw("step.completed", `{"name":"a"}`)}})
	res := e.streamRead(cr.Run.ID, 0, 0)
	wantStream(t, res, 1, `run.started={}`, `progress={"pct":10}`, `step.completed={"name":"a"}`)
	if res.Finished || res.Last != 3 {
		t.Fatalf("running run's read: Finished %v Last %d, want false 3", res.Finished, res.Last)
	}
	wantStream(t, e.streamRead(cr.Run.ID, 1, 1), 2, "progress")
	if res := e.streamRead(cr.Run.ID, 3, 0); len(res.Events) != 0 || res.Last != 3 {
		t.Fatalf("read after the last event = %+v", res)
	}
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusSucceeded, Output: []byte(`"ok"`),
		Stream: []store.StreamWrite{sw("run.succeeded", `{"result":"ok"}`)}})
	if res := e.streamRead(cr.Run.ID, 1, 2); res.Finished || len(res.Events) != 2 {
		t.Fatalf("a page that stops before the end = %+v, want 2 events, not finished", res)
	}
	res = e.streamRead(cr.Run.ID, 2, 0)
	wantStream(t, res, 3, "step.completed", "run.succeeded")
	if !res.Finished {
		t.Fatal("finished run's read to the end: Finished = false")
	}
}

// streamFinalOnRead: a run that ended without writing to its stream (a job,
// whose outcome is its one write) reads as its final event, made from its
// record, at sequence 1; nothing follows it.
func streamFinalOnRead(t *testing.T, e *env) {
	info := &store.ErrorInfo{Message: "boom", Type: "app"}
	for _, c := range []struct {
		p    store.CheckpointParams
		want string
	}{
		{store.CheckpointParams{Status: store.StatusSucceeded, Output: []byte(`{"n":2}`)}, `run.succeeded={"result":{"n":2}}`},
		{store.CheckpointParams{Status: store.StatusSucceeded, Output: []byte{0xff}}, `run.succeeded={"result":"/w=="}`},
		{store.CheckpointParams{Status: store.StatusFailed, Error: info}, `run.failed={"error":{"message":"boom","type":"app"}}`},
		{store.CheckpointParams{Status: store.StatusCancelled, Error: info}, `run.cancelled={"error":{"message":"boom","type":"app"}}`},
	} {
		cr := e.start()
		if _, remote := e.st.(*viaWorker); remote && c.p.Output != nil && !json.Valid(c.p.Output) {
			// Through a server every payload is JSON: the output is refused.
			wantErr(t, "a checkpoint of a non-JSON output through a server", e.checkpointErr(cr, c.p), store.ErrInvalidParams)
			continue
		}
		e.checkpoint(cr, c.p)
		res := e.streamRead(cr.Run.ID, 0, 0)
		wantStream(t, res, 1, c.want)
		if !res.Finished || res.Last != 1 {
			t.Fatalf("%s: Finished %v Last %d, want true 1", c.want, res.Finished, res.Last)
		}
		if res := e.streamRead(cr.Run.ID, 1, 0); len(res.Events) != 0 || !res.Finished || res.Last != 1 {
			t.Fatalf("%s: read after the final event = %+v, want none, finished, Last 1", c.want, res)
		}
	}
}

func streamStaleLease(t *testing.T, e *env) {
	cr := e.start()
	stale := *cr
	stale.LeaseToken++
	err := e.checkpointErr(&stale, store.CheckpointParams{Status: store.StatusRunning,
		Stream: []store.StreamWrite{sw("x", `1`)}})
	wantErr(t, "checkpoint with a stale lease", err, store.ErrLeaseLost)
	err = e.checkpointErr(&stale, store.CheckpointParams{Status: store.StatusSucceeded,
		Stream: []store.StreamWrite{sw("run.succeeded", `{}`)}})
	wantErr(t, "final checkpoint with a stale lease", err, store.ErrLeaseLost)
	if res := e.streamRead(cr.Run.ID, 0, 0); len(res.Events) != 0 {
		t.Fatalf("stale checkpoints wrote %d stream events", len(res.Events))
	}
	err = e.checkpointErr(cr, store.CheckpointParams{Status: store.StatusRunning,
		Stream: []store.StreamWrite{{Name: ""}}})
	wantErr(t, "an event without a name", err, store.ErrInvalidParams)
	if res := e.streamRead(cr.Run.ID, 0, 0); len(res.Events) != 0 {
		t.Fatalf("an invalid checkpoint wrote %d stream events", len(res.Events))
	}
}

func streamCancelNeverStarted(t *testing.T, e *env) {
	r := e.create()
	e.cancel(r.ID)
	res := e.streamRead(r.ID, 0, 0)
	wantStream(t, res, 1, "run.cancelled")
	if !res.Finished {
		t.Fatal("cancelled run's stream is not finished")
	}
}

func streamBlockedCancelled(t *testing.T, e *env) {
	cr := e.start()
	e.cancel(cr.Run.ID) // flagged: it ran
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusBlocked,
		Error: &store.ErrorInfo{Message: "nondeterminism"}, Stream: []store.StreamWrite{sw("note", `1`)}})
	res := e.streamRead(cr.Run.ID, 0, 0)
	wantStream(t, res, 1, "note", "run.cancelled")
	if !res.Finished {
		t.Fatal("stream of a run cancelled as it blocked is not finished")
	}
}

func streamChildEnd(t *testing.T, e *env) {
	parent := e.start()
	e.createGroup(parent, e.group(0, 2, e.newID("kid")))
	kids := e.claimChildren()
	if len(kids) != 2 {
		t.Fatalf("claimed %d children, want 2", len(kids))
	}
	for i, k := range kids {
		e.checkpoint(k, store.CheckpointParams{Status: store.StatusSucceeded, Output: []byte(`1`),
			Stream: []store.StreamWrite{sw("mine", fmt.Sprint(i)), sw("run.succeeded", `{}`)}})
		res := e.streamRead(k.Run.ID, 0, 0)
		wantStream(t, res, 1, "mine="+fmt.Sprint(i), "run.succeeded={}")
		if !res.Finished {
			t.Fatalf("child %s: stream not finished", k.Run.ID)
		}
	}
}

func streamWaitingPath(t *testing.T, e *env) {
	cr := e.start()
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusWaiting, WaitEvents: []string{"go"},
		WaitReason: "event go", Stream: []store.StreamWrite{sw("run.waiting", `{"reason":"event go"}`)}})
	e.send(cr.Run.ID, "go", `1`)
	cr = e.claimOne(cr.Run.ID)
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, Consume: []int64{cr.Inbox[0].Seq},
		Stream: []store.StreamWrite{sw("got", `1`)}})
	wantStream(t, e.streamRead(cr.Run.ID, 0, 0), 1, "run.waiting", "got")
}

// streamConcurrentRuns checkpoints many runs at once (a driver may batch them):
// each run's stream is numbered on its own, without gaps.
func streamConcurrentRuns(t *testing.T, e *env) {
	const runs, cks = 8, 5
	crs := make([]*store.ClaimedRun, runs)
	for i := range crs {
		crs[i] = e.start()
	}
	var wg sync.WaitGroup
	errs := make(chan error, runs)
	for _, cr := range crs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range cks {
				p := &store.CheckpointParams{Lease: cr.Lease(), Status: store.StatusRunning,
					Ops:    []*store.Op{e.doneStep(j, "s", `1`)},
					Stream: []store.StreamWrite{sw("a", fmt.Sprint(j)), sw("b", fmt.Sprint(j))}}
				if _, err := e.st.Checkpoint(e.ctx, p); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("Checkpoint: %v", err)
	}
	for _, cr := range crs {
		var want []string
		for j := range cks {
			want = append(want, fmt.Sprintf("a=%d", j), fmt.Sprintf("b=%d", j))
		}
		wantStream(t, e.streamRead(cr.Run.ID, 0, 0), 1, want...)
	}
}

func streamSignal(t *testing.T, e *env) {
	cr := e.start()
	ch := e.subscribe(store.StreamTopic(ns, cr.Run.ID))
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, Stream: []store.StreamWrite{sw("x", `1`)}})
	wantSignal(t, "StreamTopic after a checkpoint with events", ch)
	r := e.create()
	ch = e.subscribe(store.StreamTopic(ns, r.ID))
	e.cancel(r.ID)
	wantSignal(t, "StreamTopic after cancelling a run that never started", ch)
}

func streamBadInput(t *testing.T, e *env) {
	r := e.create()
	for _, p := range []store.StreamReadParams{
		{Namespace: ns, RunID: r.ID, After: -1},
		{Namespace: ns, RunID: r.ID, Limit: store.StreamMaxLimit + 1},
		{Namespace: ns, RunID: r.ID, Limit: -1},
		{Namespace: ns},
	} {
		_, err := e.st.StreamRead(e.ctx, &p)
		wantErr(t, fmt.Sprintf("StreamRead(%+v)", p), err, store.ErrInvalidParams)
	}
	_, err := e.st.StreamRead(e.ctx, &store.StreamReadParams{Namespace: ns, RunID: "nope"})
	wantErr(t, "StreamRead of an unknown run", err, store.ErrRunNotFound)
	_, err = e.st.StreamRead(e.ctx, &store.StreamReadParams{Namespace: "other", RunID: r.ID})
	wantErr(t, "StreamRead in another namespace", err, store.ErrRunNotFound)
}
