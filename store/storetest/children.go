package storetest

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// Child runs: groups a checkpoint starts, their accounting, and cancellation.
var childCases = []testCase{
	{"GroupCreated", childGroupCreated},
	{"MaxConcurrencyReleasesInOrder", childMaxConcurrency},
	{"GroupEventWakesParent", childGroupEvent},
	{"FailFast", childFailFast},
	{"Detached", childDetached},
	{"CancelCascades", childCancelCascade},
	{"CancelHeldChild", childCancelHeld},
	{"DuplicateID", childDuplicateID},
	{"RunChildrenUnknownParent", childUnknownParent},
	{"EmptyGroupInvalid", childEmptyGroup},
}

// childWF is the workflow of child runs: claims of wf never take them.
const childWF = "child"

// group returns a group at position of n child runs of childWF, IDs prefix-0...
func (e *env) group(position, n int, prefix string) *store.ChildGroup {
	g := &store.ChildGroup{Position: position}
	for i := range n {
		id := fmt.Sprintf("%s-%d", prefix, i)
		g.Runs = append(g.Runs, &store.RunCreateParams{ID: id, WorkflowID: id, Workflow: childWF,
			Queue: queue, Input: []byte(fmt.Sprint(i))})
	}
	return g
}

// children lists the children of parent's group at position.
func (e *env) children(parent string, position int) []*store.Run {
	e.t.Helper()
	runs, err := e.st.RunChildren(e.ctx, &store.RunChildrenParams{Namespace: ns, Parent: parent, Position: position})
	if err != nil {
		e.t.Fatalf("RunChildren(%s, %d): %v", parent, position, err)
	}
	return runs
}

// claimChildren claims due child runs.
func (e *env) claimChildren() []*store.ClaimedRun {
	e.t.Helper()
	return e.claim(claimWorkflows(childWF)).Runs
}

func (e *env) end(cr *store.ClaimedRun, status store.Status) {
	e.t.Helper()
	p := store.CheckpointParams{Status: status}
	if status == store.StatusSucceeded {
		p.Output = []byte(`"ok"`)
	} else {
		p.Error = &store.ErrorInfo{Message: string(status), Type: string(status)}
	}
	e.checkpoint(cr, p)
}

// outcomeIn returns the GroupOutcomes in an inbox under name.
func outcomeIn(t *testing.T, inbox []*store.Event, name string) []store.GroupOutcome {
	t.Helper()
	var outs []store.GroupOutcome
	for _, ev := range inbox {
		if ev.Name != name {
			continue
		}
		var o store.GroupOutcome
		if err := json.Unmarshal(ev.Payload, &o); err != nil {
			t.Fatalf("group event payload %q: %v", ev.Payload, err)
		}
		outs = append(outs, o)
	}
	return outs
}

// createGroup creates g in a checkpoint that keeps parent running.
func (e *env) createGroup(parent *store.ClaimedRun, g *store.ChildGroup) {
	e.t.Helper()
	e.checkpoint(parent, store.CheckpointParams{Status: store.StatusRunning, Children: []*store.ChildGroup{g},
		Ops: []*store.Op{{Position: g.Position, Kind: store.OpChild, Name: "map", StartedAt: e.clk.Now()}}})
}

func childGroupCreated(t *testing.T, e *env) {
	parent := e.start()
	g := e.group(3, 3, "c")
	g.Runs[1].Priority, g.Runs[1].Version = 5, 2
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	g.Runs[2].TraceParent = tp
	e.createGroup(parent, g)
	kids := e.children(parent.Run.ID, 3)
	wantIDs(t, "RunChildren", runIDs(kids), []string{"c-0", "c-1", "c-2"})
	for i, k := range kids {
		if k.ParentID != parent.Run.ID || k.Namespace != ns || k.Status != store.StatusPending ||
			k.Workflow != childWF || string(k.Input) != fmt.Sprint(i) {
			t.Fatalf("child %d = %+v, want a pending child of %s with its input", i, k, parent.Run.ID)
		}
	}
	if k := e.get("c-1"); k.Priority != 5 || k.Version != 2 || k.ParentID != parent.Run.ID || k.TraceParent != "" {
		t.Fatalf("RunGet(c-1) = %+v, want priority 5, version 2, parent %s, no trace parent", k, parent.Run.ID)
	}
	// A child's trace context is stored with it (and comes back when it is
	// claimed, below).
	if k := e.get("c-2"); k.TraceParent != tp {
		t.Fatalf("RunGet(c-2).TraceParent = %q, want %q", k.TraceParent, tp)
	}
	if p := e.get(parent.Run.ID); p.ParentID != "" {
		t.Fatalf("parent's ParentID = %q, want empty", p.ParentID)
	}
	if got := e.children(parent.Run.ID, 4); len(got) != 0 {
		t.Fatalf("RunChildren at another position = %v, want none", runIDs(got))
	}
	claimed := e.claimChildren()
	wantIDSet(t, "claimed children", claimedIDs(claimed), []string{"c-0", "c-1", "c-2"})
	for _, cr := range claimed {
		if cr.Run.ParentID != parent.Run.ID {
			t.Fatalf("claimed child ParentID = %q", cr.Run.ParentID)
		}
		if want := map[bool]string{true: tp}[cr.Run.ID == "c-2"]; cr.Run.TraceParent != want {
			t.Fatalf("claimed child %s: TraceParent = %q, want %q", cr.Run.ID, cr.Run.TraceParent, want)
		}
	}
}

func childMaxConcurrency(t *testing.T, e *env) {
	e.serveAll() // a pending child's own wait reason is what the case checks
	parent := e.start()
	g := e.group(1, 5, "c")
	g.MaxConcurrency = 2
	e.createGroup(parent, g)
	for i, k := range e.children(parent.Run.ID, 1) {
		if held := i >= 2; held != (k.WaitReason != "") || k.Status != store.StatusPending {
			t.Fatalf("child %d = %+v: want pending, with a wait reason iff held", i, k)
		}
	}
	e.clk.Advance(time.Second) // held children are never due
	c := e.claimChildren()
	wantIDs(t, "first claim", claimedIDs(c), []string{"c-0", "c-1"})
	e.end(c[1], store.StatusSucceeded)
	c2 := e.claimChildren()
	wantIDs(t, "claim after c-1 ended", claimedIDs(c2), []string{"c-2"})
	if k := e.get("c-2"); k.WaitReason != "" {
		t.Fatalf("released child WaitReason = %q", k.WaitReason)
	}
	e.end(c[0], store.StatusFailed)
	e.end(c2[0], store.StatusSucceeded)
	c3 := e.claimChildren()
	wantIDs(t, "claim after c-0 and c-2 ended", claimedIDs(c3), []string{"c-3", "c-4"})
	e.end(c3[0], store.StatusCancelled)
	e.end(c3[1], store.StatusSucceeded)
	e.checkpoint(parent, store.CheckpointParams{Status: store.StatusPending})
	got := outcomeIn(t, e.claimOne(parent.Run.ID).Inbox, store.GroupEvent(1))
	want := store.GroupOutcome{Total: 5, Succeeded: 3, Failed: 1, Cancelled: 1}
	if len(got) != 1 || got[0] != want {
		t.Fatalf("group events = %+v, want one %+v", got, want)
	}
}

func childGroupEvent(t *testing.T, e *env) {
	parent := e.start()
	g := e.group(2, 2, "c")
	e.checkpoint(parent, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "children",
		WaitEvents: []string{store.GroupEvent(2)}, Children: []*store.ChildGroup{g}})
	c := e.claimChildren()
	e.end(c[0], store.StatusSucceeded)
	e.wantStatus(parent.Run.ID, store.StatusWaiting)
	ready := e.subscribe(store.TopicReady)
	e.end(c[1], store.StatusSucceeded)
	wantSignal(t, "TopicReady after the last child ended", ready)
	e.wantStatus(parent.Run.ID, store.StatusPending)
	again := e.claimOne(parent.Run.ID)
	want := store.GroupOutcome{Total: 2, Succeeded: 2}
	if got := outcomeIn(t, again.Inbox, store.GroupEvent(2)); len(got) != 1 || got[0] != want {
		t.Fatalf("group events = %+v, want one %+v", got, want)
	}
}

func childFailFast(t *testing.T, e *env) {
	parent := e.start()
	g := e.group(1, 5, "c")
	g.MaxConcurrency, g.FailFast = 3, true
	e.startGroupWith(parent, g)
	c := e.claimChildren() // c-3 and c-4 are held
	wantIDs(t, "claimed", claimedIDs(c), []string{"c-0", "c-1", "c-2"})
	e.end(c[2], store.StatusSucceeded) // releases c-3
	e.end(c[0], store.StatusFailed)
	for _, id := range []string{"c-3", "c-4"} {
		if k := e.wantStatus(id, store.StatusCancelled); k.FinishedAt == nil {
			t.Fatalf("cancelled child %s has no FinishedAt", id)
		}
	}
	if k := e.wantStatus("c-1", store.StatusRunning); !k.CancelRequested {
		t.Fatal("running sibling of a failed FailFast child: CancelRequested = false")
	}
	e.wantStatus(parent.Run.ID, store.StatusPending)
	e.end(c[1], store.StatusCancelled)
	inbox := e.claimOne(parent.Run.ID).Inbox
	want := store.GroupOutcome{Total: 5, Succeeded: 1, Failed: 1, Cancelled: 2}
	if got := outcomeIn(t, inbox, store.GroupEvent(1)); len(got) != 1 || got[0] != want {
		t.Fatalf("group events = %+v, want exactly one %+v", got, want)
	}
}

// startGroupWith checkpoints parent waiting for g's event, creating g.
func (e *env) startGroupWith(parent *store.ClaimedRun, g *store.ChildGroup) {
	e.t.Helper()
	e.checkpoint(parent, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "children",
		WaitEvents: []string{store.GroupEvent(g.Position)}, Children: []*store.ChildGroup{g}})
}

func childDetached(t *testing.T, e *env) {
	parent := e.start()
	g := e.group(1, 2, "d")
	g.Detached = true
	wake := e.clk.Now().Add(time.Minute)
	e.checkpoint(parent, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "sleep", WakeAt: &wake,
		WaitEvents: []string{store.GroupEvent(1)}, Children: []*store.ChildGroup{g}})
	c := e.claimChildren()
	e.end(c[0], store.StatusSucceeded)
	e.end(c[1], store.StatusFailed)
	e.wantStatus(parent.Run.ID, store.StatusWaiting)
	e.clk.Advance(time.Minute)
	again := e.claimOne(parent.Run.ID)
	wantInbox(t, again)

	g2 := e.group(2, 1, "d2")
	g2.Detached = true
	e.createGroup(again, g2)
	e.cancel(parent.Run.ID)
	if k := e.wantStatus("d2-0", store.StatusPending); k.CancelRequested {
		t.Fatal("a detached child was cancelled with its parent")
	}
}

func childCancelCascade(t *testing.T, e *env) {
	parent := e.start()
	e.startGroupWith(parent, e.group(1, 2, "c"))
	c := e.claimChildren()
	// c-0 starts grandchildren: g-0 pending, g-1 held; c-1 never claimed again.
	gg := e.group(1, 2, "g")
	gg.MaxConcurrency = 1
	e.startGroupWith(c[0], gg)
	e.clk.Advance(time.Second)
	e.cancel(parent.Run.ID)
	if k := e.wantStatus("c-0", store.StatusPending); !k.CancelRequested {
		t.Fatal("waiting child of a cancelled parent: CancelRequested = false")
	}
	if k := e.wantStatus("c-1", store.StatusRunning); !k.CancelRequested {
		t.Fatal("running child of a cancelled parent: CancelRequested = false")
	}
	for _, id := range []string{"g-0", "g-1"} {
		k := e.wantStatus(id, store.StatusCancelled)
		wantTimePtr(t, id+" FinishedAt", k.FinishedAt, e.clk.Now())
	}
	if k := e.wantStatus(parent.Run.ID, store.StatusPending); !k.CancelRequested {
		t.Fatal("cancelled parent: CancelRequested = false")
	}
	// c-0 was told its group ended.
	cr := e.claimOne("c-0", claimWorkflows(childWF))
	want := store.GroupOutcome{Total: 2, Cancelled: 2}
	if got := outcomeIn(t, cr.Inbox, store.GroupEvent(1)); len(got) != 1 || got[0] != want {
		t.Fatalf("grandchild group events = %+v, want one %+v", got, want)
	}
}

func childCancelHeld(t *testing.T, e *env) {
	parent := e.start()
	g := e.group(1, 3, "c")
	g.MaxConcurrency = 1
	e.startGroupWith(parent, g)
	e.cancel("c-1") // held: ends at once, releases nothing
	e.wantStatus("c-1", store.StatusCancelled)
	c := e.claimChildren()
	wantIDs(t, "claimed", claimedIDs(c), []string{"c-0"})
	e.end(c[0], store.StatusSucceeded)
	c = e.claimChildren()
	wantIDs(t, "claimed after c-0 ended", claimedIDs(c), []string{"c-2"})
	e.end(c[0], store.StatusSucceeded)
	inbox := e.claimOne(parent.Run.ID).Inbox
	want := store.GroupOutcome{Total: 3, Succeeded: 2, Cancelled: 1}
	if got := outcomeIn(t, inbox, store.GroupEvent(1)); len(got) != 1 || got[0] != want {
		t.Fatalf("group events = %+v, want one %+v", got, want)
	}
}

func childDuplicateID(t *testing.T, e *env) {
	parent := e.start()
	taken := e.create()
	dupExisting := e.group(1, 2, "c")
	dupExisting.Runs[1].ID = taken.ID
	dupWithin := e.group(1, 2, "c")
	dupWithin.Runs[1].ID = "c-0"
	for _, g := range []*store.ChildGroup{dupExisting, dupWithin} {
		p := e.everything()
		p.Status = store.StatusWaiting
		p.Children = []*store.ChildGroup{g}
		wantErr(t, "Checkpoint creating a child with a taken ID", e.checkpointErr(parent, p), store.ErrRunExists)
	}
	e.wantUntouched(parent.Run.ID)
	e.wantStatus(parent.Run.ID, store.StatusRunning)
	if kids := e.children(parent.Run.ID, 1); len(kids) != 0 {
		t.Fatalf("children after a rejected checkpoint: %v", runIDs(kids))
	}
	_, err := e.st.RunGet(e.ctx, &store.RunGetParams{Namespace: ns, Ref: "c-0"})
	wantErr(t, "RunGet of a child of a rejected checkpoint", err, store.ErrRunNotFound)
}

func childUnknownParent(t *testing.T, e *env) {
	_, err := e.st.RunChildren(e.ctx, &store.RunChildrenParams{Namespace: ns, Parent: "nope", Position: 0})
	wantErr(t, "RunChildren of an unknown parent", err, store.ErrRunNotFound)
}

func childEmptyGroup(t *testing.T, e *env) {
	parent := e.start()
	p := e.everything()
	p.Children = []*store.ChildGroup{{Position: 1}}
	wantErr(t, "Checkpoint creating an empty group", e.checkpointErr(parent, p), store.ErrInvalidParams)
	e.wantUntouched(parent.Run.ID)
}
