package storetest

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// Events: EventSend adds to a run's inbox; claims return the inbox; checkpoints
// consume from it, wait on it (WaitEvents) and guard against it (NoEvents).
var eventCases = []testCase{
	{"UnknownOrFinishedRun", eventUnknownOrFinished},
	{"NameRequired", eventNameRequired},
	{"InboxBeforeFirstClaim", eventInboxFIFO},
	{"ConsumeOnce", eventConsume},
	{"ConsumeAnotherRunsEvent", eventConsumeForeign},
	{"WakesOnlyForWaitedNames", eventWake},
	{"WaitWithEventInInbox", eventWaitWithInbox},
	{"WaitWithEventConsumedMeanwhile", eventWaitConsumed},
	{"NoEventsConflict", eventNoEvents},
	{"KeptWhilePendingOrRunning", eventKept},
	{"ClaimOnWake", eventClaimOnWake},
	{"ClaimOnlyWhenWokenAndServed", eventClaimDeclined},
}

func (e *env) sendErr(ref, name, payload string) (*store.Event, error) {
	var b []byte
	if payload != "" {
		b = []byte(payload)
	}
	res, err := e.st.EventSend(e.ctx, &store.EventSendParams{Namespace: ns, Ref: ref, Name: name, Payload: b})
	if err != nil {
		return nil, err
	}
	return res.Event, nil
}

// send sends an event to run ref of namespace ns and fails on error.
func (e *env) send(ref, name, payload string) *store.Event {
	e.t.Helper()
	ev, err := e.sendErr(ref, name, payload)
	if err != nil {
		e.t.Fatalf("EventSend(%s, %s): %v", ref, name, err)
	}
	return ev
}

// wait checkpoints a claimed run waiting for events of names (and an op at 0).
func (e *env) wait(cr *store.ClaimedRun, names ...string) {
	e.t.Helper()
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "event",
		WaitEvents: names, Ops: []*store.Op{e.doneStep(0, "s", `1`)}})
}

// inboxOf describes an inbox as "name=payload" items.
func inboxOf(evs []*store.Event) []string {
	out := make([]string, 0, len(evs))
	for _, ev := range evs {
		out = append(out, fmt.Sprintf("%s=%s", ev.Name, ev.Payload))
	}
	return out
}

// wantInbox fails unless the claimed run's inbox is want ("name=payload"), in Seq
// order, each event naming its run.
func wantInbox(t *testing.T, cr *store.ClaimedRun, want ...string) {
	t.Helper()
	wantIDs(t, "Inbox of "+cr.Run.ID, inboxOf(cr.Inbox), want)
	for i, ev := range cr.Inbox {
		if ev.Namespace != cr.Run.Namespace || ev.RunID != cr.Run.ID {
			t.Fatalf("inbox event %+v does not name run %s/%s", ev, cr.Run.Namespace, cr.Run.ID)
		}
		if i > 0 && ev.Seq <= cr.Inbox[i-1].Seq {
			t.Fatalf("inbox Seqs %d then %d: not in Seq order", cr.Inbox[i-1].Seq, ev.Seq)
		}
	}
}

func eventUnknownOrFinished(t *testing.T, e *env) {
	_, err := e.sendErr("nope", "a", `1`)
	wantErr(t, "EventSend to an unknown run", err, store.ErrRunNotFound)
	cr := e.start()
	e.finish(cr)
	_, err = e.sendErr(cr.Run.ID, "a", `1`)
	wantErr(t, "EventSend to a finished run", err, store.ErrRunFinished)
	// A new run with the same workflow ID has an empty inbox: nothing was kept.
	again := e.start(withWorkflowID(cr.Run.WorkflowID))
	wantInbox(t, again)
}

func eventNameRequired(t *testing.T, e *env) {
	r := e.create()
	_, err := e.sendErr(r.ID, "", `1`)
	wantErr(t, "EventSend without a name", err, store.ErrInvalidParams)
	_, err = e.sendErr(r.ID, store.ApprovalEvent("x"), `{"status":"approved"}`)
	wantErr(t, "EventSend with a reserved name", err, store.ErrInvalidParams)
	wantInbox(t, e.claimOne(r.ID))
}

func (e *env) sendClaim(ref, name string, c *store.EventClaim) *store.EventSendResult {
	e.t.Helper()
	res, err := e.st.EventSend(e.ctx, &store.EventSendParams{Namespace: ns, Ref: ref, Name: name, Payload: []byte(`7`), Claim: c})
	if err != nil {
		e.t.Fatalf("EventSend(%s, %s, claim): %v", ref, name, err)
	}
	return res
}

// eventClaimOnWake: an event that wakes a run can lease it to the sender's
// worker at once, with its history and inbox.
func eventClaimOnWake(t *testing.T, e *env) {
	cr := e.start()
	e.wait(cr, "go")
	now := e.clk.Advance(time.Second)
	res := e.sendClaim(cr.Run.ID, "go", &store.EventClaim{Worker: "local", LeaseDuration: leaseDur, Workflows: []string{wf}})
	c := res.Claimed
	if c == nil || res.Event == nil || c.LeaseToken <= cr.LeaseToken || c.Run.Status != store.StatusRunning ||
		c.Run.LeaseOwner != "local" || c.Run.Attempts != 2 {
		t.Fatalf("EventSend with Claim = %+v, want the run claimed by local, attempt 2, with a new token", res)
	}
	wantTime(t, "LeaseExpiresAt", c.LeaseExpiresAt, now.Add(leaseDur))
	if len(c.History) != 1 || c.History[0].Position != 0 {
		t.Fatalf("claimed history %v, want the op at 0", opPositions(c.History))
	}
	wantInbox(t, c, "go=7")
	e.wantNoClaim()
	e.checkpoint(c, store.CheckpointParams{Status: store.StatusSucceeded, Consume: []int64{c.Inbox[0].Seq}})
}

// eventClaimDeclined: no claim for a run not waiting on the name, nor for a
// workflow or queue the claiming worker does not serve (the run is still woken).
func eventClaimDeclined(t *testing.T, e *env) {
	claim := &store.EventClaim{Worker: "local", LeaseDuration: leaseDur, Workflows: []string{wf}}
	busy := e.start()
	if res := e.sendClaim(busy.Run.ID, "go", claim); res.Claimed != nil {
		t.Fatalf("claimed a running run: %+v", res.Claimed)
	}
	e.finish(busy)
	for _, c := range []*store.EventClaim{
		{Worker: "local", LeaseDuration: leaseDur, Workflows: []string{"other"}},
		{Worker: "local", LeaseDuration: leaseDur, Workflows: []string{wf}, Queues: []string{"elsewhere"}},
	} {
		cr := e.start()
		e.wait(cr, "go")
		if res := e.sendClaim(cr.Run.ID, "go", c); res.Claimed != nil {
			t.Fatalf("claimed for a worker that does not serve it (%+v): %+v", c, res.Claimed)
		}
		e.wantStatus(cr.Run.ID, store.StatusPending)
		e.finish(e.claimOne(cr.Run.ID))
	}
	_, err := e.st.EventSend(e.ctx, &store.EventSendParams{Namespace: ns, Ref: "x", Name: "go", Claim: &store.EventClaim{Worker: "local"}})
	wantErr(t, "EventSend with a claim without a lease duration", err, store.ErrInvalidParams)
}

func eventInboxFIFO(t *testing.T, e *env) {
	r := e.create()
	e.clk.Advance(time.Second)
	first := e.send(r.ID, "a", `1`)
	if first.RunID != r.ID || first.Namespace != ns || first.Name != "a" || !bytes.Equal(first.Payload, []byte(`1`)) {
		t.Fatalf("EventSend = %+v, want the event of run %s", first, r.ID)
	}
	wantTime(t, "SentAt", first.SentAt, e.clk.Now())
	e.send(r.WorkflowID, "b", `2`) // by workflow ID
	e.send(r.ID, "a", `3`)
	cr := e.claimOne(r.ID)
	wantInbox(t, cr, "a=1", "b=2", "a=3")
	if cr.Inbox[0].Seq != first.Seq {
		t.Fatalf("first inbox Seq = %d, want %d", cr.Inbox[0].Seq, first.Seq)
	}
	wantTime(t, "inbox SentAt", cr.Inbox[0].SentAt, first.SentAt)
}

func eventConsume(t *testing.T, e *env) {
	r := e.create()
	a, b := e.send(r.ID, "a", `1`), e.send(r.ID, "b", `2`)
	cr := e.claimOne(r.ID)
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, Consume: []int64{a.Seq},
		Ops: []*store.Op{e.doneStep(0, "got-a", `1`)}})
	for _, bad := range [][]int64{{a.Seq}, {b.Seq, b.Seq}, {b.Seq, a.Seq}, {b.Seq + 1000}} {
		err := e.checkpointErr(cr, store.CheckpointParams{Status: store.StatusRunning, Consume: bad,
			Ops: []*store.Op{e.doneStep(1, "bad", `1`)}, KV: []store.KVWrite{{Key: "k", Value: []byte(`"v"`)}}})
		wantErr(t, fmt.Sprintf("Checkpoint consuming %v", bad), err, store.ErrInvalidParams)
	}
	if ops := e.history(r.ID); len(ops) != 1 {
		t.Fatalf("history = %v: a rejected Consume wrote ops", opNames(ops))
	}
	_, err := e.kvGet(r.ID, "k")
	wantErr(t, "KVGet after a rejected Consume", err, store.ErrKeyNotFound)
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusPending})
	wantInbox(t, e.claimOne(r.ID), "b=2")
}

func eventConsumeForeign(t *testing.T, e *env) {
	cr := e.start()
	other := e.create()
	foreign := e.send(other.ID, "a", `1`)
	err := e.checkpointErr(cr, store.CheckpointParams{Status: store.StatusSucceeded, Consume: []int64{foreign.Seq},
		Ops: []*store.Op{e.doneStep(0, "s", `1`)}})
	wantErr(t, "Checkpoint consuming another run's event", err, store.ErrInvalidParams)
	e.wantUntouched(cr.Run.ID)
	e.wantStatus(cr.Run.ID, store.StatusRunning)
	wantInbox(t, e.claimOne(other.ID), "a=1")
}

func eventWake(t *testing.T, e *env) {
	e.serveAll() // the pending run's own wait reason is what the case checks
	cr := e.start()
	wake := e.clk.Now().Add(time.Hour)
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "event a", WakeAt: &wake,
		WaitEvents: []string{"a", "c"}})
	e.send(cr.Run.ID, "b", `1`)
	e.wantStatus(cr.Run.ID, store.StatusWaiting)
	e.wantNoClaim()
	ready := e.subscribe(store.TopicReady)
	run := e.subscribe(store.RunTopic(ns, cr.Run.ID))
	e.send(cr.Run.ID, "a", `2`)
	wantSignal(t, "TopicReady after an awaited event", ready)
	wantSignal(t, "run topic after an awaited event", run)
	if r := e.wantStatus(cr.Run.ID, store.StatusPending); r.WaitReason != "" {
		t.Fatalf("woken run WaitReason = %q, want empty", r.WaitReason)
	}
	wantInbox(t, e.claimOne(cr.Run.ID), "b=1", "a=2")

	// A waiting run without WaitEvents is not woken by events.
	plain := e.start()
	e.checkpoint(plain, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "sleep", WakeAt: &wake})
	e.send(plain.Run.ID, "a", `3`)
	e.wantStatus(plain.Run.ID, store.StatusWaiting)
}

func eventWaitWithInbox(t *testing.T, e *env) {
	e.serveAll() // the pending run's own wait reason is what the case checks
	cr := e.start()
	e.send(cr.Run.ID, "a", `1`)
	e.wait(cr, "x", "a")
	if r := e.wantStatus(cr.Run.ID, store.StatusPending); r.WaitReason != "" {
		t.Fatalf("run = %+v, want pending with no wait reason", r)
	}
	again := e.claimOne(cr.Run.ID)
	wantInbox(t, again, "a=1")
	if len(again.History) != 1 {
		t.Fatalf("history = %v, want the waiting checkpoint's op", opPositions(again.History))
	}
}

func eventWaitConsumed(t *testing.T, e *env) {
	cr := e.start()
	ev := e.send(cr.Run.ID, "a", `1`)
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "event a",
		WaitEvents: []string{"a"}, Consume: []int64{ev.Seq}})
	e.wantStatus(cr.Run.ID, store.StatusWaiting)
	e.send(cr.Run.ID, "a", `2`)
	wantInbox(t, e.claimOne(cr.Run.ID), "a=2")
}

func eventNoEvents(t *testing.T, e *env) {
	cr := e.start()
	ev := e.send(cr.Run.ID, "a", `1`)
	p := e.everything()
	p.NoEvents = []string{"x", "a"}
	wantErr(t, "Checkpoint with NoEvents and such an event in the inbox", e.checkpointErr(cr, p), store.ErrConflict)
	e.wantUntouched(cr.Run.ID)
	e.wantStatus(cr.Run.ID, store.StatusRunning)
	// Other names do not conflict, nor does an event the checkpoint consumes.
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, NoEvents: []string{"b"}})
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, NoEvents: []string{"a"}, Consume: []int64{ev.Seq}})
}

func eventKept(t *testing.T, e *env) {
	cr := e.start()
	e.send(cr.Run.ID, "a", `1`)
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, Ops: []*store.Op{e.doneStep(0, "s", `1`)}})
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusPending})
	e.wantStatus(cr.Run.ID, store.StatusPending)
	e.send(cr.Run.ID, "b", `2`)
	e.wantStatus(cr.Run.ID, store.StatusPending)
	again := e.claimOne(cr.Run.ID)
	wantInbox(t, again, "a=1", "b=2")
	// Claimed again after its lease expired, the run still sees every event.
	e.clk.Advance(leaseDur)
	wantInbox(t, e.claimOne(cr.Run.ID), "a=1", "b=2")
}
