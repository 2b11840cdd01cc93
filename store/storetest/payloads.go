package storetest

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// Large payloads (docs/payloads.md): a store may keep payloads above a
// threshold apart from their rows; whatever it does, every read that returns
// a payload returns it whole, and a run's deletion takes them along. A list
// may leave them out (RunList does not load them). The cases use payloads of
// 1 MiB, above the drivers' default threshold (256 KiB).
var payloadCases = []testCase{
	{"RoundTrip", payloadsRoundTrip},
	{"EventAndChild", payloadsEventAndChild},
	{"Seeded", payloadsSeeded},
	{"Batch", payloadsBatch},
	{"Delete", payloadsDelete},
}

// bigJSON is a JSON string of about n bytes, different for each tag.
func bigJSON(tag string, n int) []byte {
	return []byte(`"` + tag + ":" + strings.Repeat("x", n) + `"`)
}

func wantPayload(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes (%.40q...), want %d bytes (%.40q...)", what, len(got), got, len(want), want)
	}
}

// wantListed checks a run as RunList returns it: its payload whole, or left
// out.
func wantListed(t *testing.T, what string, got, want []byte) {
	t.Helper()
	if len(got) != 0 {
		wantPayload(t, what, got, want)
	}
}

func payloadsRoundTrip(t *testing.T, e *env) {
	in, res, val, out := bigJSON("in", 1<<20), bigJSON("res", 1<<20), bigJSON("val", 1<<20), bigJSON("out", 1<<20)
	small := []byte(`"small"`)
	p := e.params()
	p.Input = in
	cres, err := e.st.RunCreate(e.ctx, p)
	if err != nil {
		t.Fatalf("RunCreate: %v", err)
	}
	wantPayload(t, "RunCreate's run input", cres.Run.Input, in)
	wantPayload(t, "the caller's input after RunCreate", p.Input, in)
	wantPayload(t, "RunGet input", e.get(p.ID).Input, in)
	cr := e.claimOne(p.ID)
	wantPayload(t, "claimed input", cr.Run.Input, in)
	ops := []*store.Op{e.doneStep(0, "big", string(res)), e.doneStep(1, "small", string(small))}
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusRunning, Ops: ops,
		KV:     []store.KVWrite{{Key: "big", Value: val}, {Key: "small", Value: small}},
		Stream: []store.StreamWrite{{Name: "progress", Data: val}}})
	wantPayload(t, "the caller's op result after Checkpoint", ops[0].Result, res)
	h := e.history(p.ID)
	if len(h) != 2 {
		t.Fatalf("history has %d ops, want 2", len(h))
	}
	wantPayload(t, "history result 0", h[0].Result, res)
	wantPayload(t, "history result 1", h[1].Result, small)
	got, err := e.kvGet(p.ID, "big")
	if err != nil {
		t.Fatal(err)
	}
	wantPayload(t, "KVGet big", got, val)
	e.wantKV(p.ID, "small", `"small"`)
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusSucceeded, Output: out,
		Stream: []store.StreamWrite{store.FinalEvent(store.StatusSucceeded, out, nil)}})
	r := e.get(p.ID)
	wantPayload(t, "RunGet input after finish", r.Input, in)
	wantPayload(t, "RunGet output", r.Output, out)
	many := e.runsGet(store.RunsGetParams{Namespace: ns, IDs: []string{p.ID}})
	wantPayload(t, "RunsGet output", many[p.ID].Output, out)
	list, err := e.st.RunList(e.ctx, &store.RunListParams{Namespace: ns})
	if err != nil || len(list.Runs) != 1 {
		t.Fatalf("RunList = %v, %v; want the run", list, err)
	}
	wantListed(t, "RunList input", list.Runs[0].Input, in)
	wantListed(t, "RunList output", list.Runs[0].Output, out)
	st := e.streamRead(p.ID, 0, 10)
	if len(st.Events) != 2 {
		t.Fatalf("stream has %d events, want 2", len(st.Events))
	}
	wantPayload(t, "stream event data", st.Events[0].Data, val)
	wantPayload(t, "final stream event", st.Events[1].Data, store.FinalEvent(store.StatusSucceeded, out, nil).Data)
}

func payloadsEventAndChild(t *testing.T, e *env) {
	ev, childIn := bigJSON("ev", 1<<20), bigJSON("child", 1<<20)
	r := e.create()
	cr := e.claimOne(r.ID)
	e.wait(cr, "go")
	sent := e.send(r.ID, "go", string(ev))
	wantPayload(t, "EventSend's event", sent.Payload, ev)
	cr = e.claimOne(r.ID)
	if len(cr.Inbox) != 1 {
		t.Fatalf("inbox has %d events, want 1", len(cr.Inbox))
	}
	wantPayload(t, "inbox payload", cr.Inbox[0].Payload, ev)
	g := e.group(1, 1, "kid")
	g.Runs[0].Input = childIn
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "child",
		Ops:      []*store.Op{{Position: 1, Kind: store.OpChild, Name: "kid", StartedAt: e.clk.Now()}},
		Consume:  []int64{cr.Inbox[0].Seq},
		Children: []*store.ChildGroup{g}})
	wantPayload(t, "the caller's child input", g.Runs[0].Input, childIn)
	kids := e.children(r.ID, 1)
	if len(kids) != 1 {
		t.Fatalf("%d children, want 1", len(kids))
	}
	wantPayload(t, "RunChildren input", kids[0].Input, childIn)
	wantPayload(t, "child RunGet input", e.get(kids[0].ID).Input, childIn)
	kc := e.claimOne(kids[0].ID, claimWorkflows(childWF))
	wantPayload(t, "child claimed input", kc.Run.Input, childIn)
}

func payloadsBatch(t *testing.T, e *env) {
	first, second := bigJSON("first", 1<<20), bigJSON("second", 1<<20)
	a := e.params(func(p *store.RunCreateParams) { p.Input = first })
	b := e.params(func(p *store.RunCreateParams) { p.Input = second })
	res := e.batch(a, b)
	wantPayload(t, "batch item 0", res.Items[0].Run.Input, first)
	wantPayload(t, "batch item 1", res.Items[1].Run.Input, second)
	wantPayload(t, "RunGet of a batch's run", e.get(b.ID).Input, second)
	// An item that returns the existing run gets its input whole.
	again := e.params(withWorkflowID(a.WorkflowID), withReuse(store.ReuseReturnExisting))
	res = e.batch(again)
	if res.Items[0].Created || res.Items[0].Run.ID != a.ID {
		t.Fatalf("ReuseReturnExisting gave %+v, want run %s", res.Items[0], a.ID)
	}
	wantPayload(t, "the existing run's input", res.Items[0].Run.Input, first)
	cres, err := e.st.RunCreate(e.ctx, e.params(withWorkflowID(b.WorkflowID), withReuse(store.ReuseReturnExisting)))
	if err != nil || cres.Created {
		t.Fatalf("RunCreate ReuseReturnExisting = %+v, %v", cres, err)
	}
	wantPayload(t, "RunCreate's existing run input", cres.Run.Input, second)
}

func payloadsSeeded(t *testing.T, e *env) {
	res, val := bigJSON("res", 1<<20), bigJSON("val", 1<<20)
	p := e.params()
	p.History = []*store.Op{e.doneStep(0, "a", string(res))}
	p.KV = []store.KVWrite{{Key: "k", Value: val}}
	if _, err := e.st.RunCreate(e.ctx, p); err != nil {
		if errors.Is(err, store.ErrInvalidParams) && strings.Contains(err.Error(), "History") {
			t.Skipf("seeded runs: %v", err)
		}
		t.Fatalf("RunCreate: %v", err)
	}
	cr := e.claimOne(p.ID)
	if len(cr.History) != 1 {
		t.Fatalf("claimed history has %d ops, want 1", len(cr.History))
	}
	wantPayload(t, "claimed history result", cr.History[0].Result, res)
	got, err := e.kvGet(p.ID, "k")
	if err != nil {
		t.Fatal(err)
	}
	wantPayload(t, "seeded KVGet", got, val)
}

func payloadsDelete(t *testing.T, e *env) {
	del, ok := e.st.(store.RunDeleter)
	if !ok {
		t.Skip("not a RunDeleter")
	}
	mk := func(tag string) (*store.Run, []byte) {
		in := bigJSON(tag, 1<<20)
		r := e.create(func(p *store.RunCreateParams) { p.Input = in })
		cr := e.claimOne(r.ID)
		e.checkpoint(cr, store.CheckpointParams{Status: store.StatusSucceeded, Output: bigJSON(tag+"-out", 1<<20),
			Ops: []*store.Op{e.doneStep(0, "s", string(bigJSON(tag+"-res", 1<<20)))}})
		return r, in
	}
	gone, _ := mk("gone")
	keep, keepIn := mk("keep")
	if _, err := del.RunDelete(e.ctx, &store.RunDeleteParams{Namespace: ns, Ref: gone.ID}); err != nil {
		t.Fatalf("RunDelete: %v", err)
	}
	e.wantGone(gone, "")
	r := e.get(keep.ID)
	wantPayload(t, "the other run's input", r.Input, keepIn)
	wantPayload(t, "the other run's output", r.Output, bigJSON("keep-out", 1<<20))
	h := e.history(keep.ID)
	wantPayload(t, "the other run's result", h[0].Result, bigJSON("keep-res", 1<<20))
}

// RunPayloads runs the payload cases alone, against stores made by newStore
// (a driver runs them again with its payloads in an object store).
func RunPayloads(t *testing.T, newStore func(t *testing.T, now func() time.Time) store.Store) {
	s := &suite{newStore: newStore}
	for _, c := range payloadCases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t, s.setup(t))
		})
	}
}

// PayloadsApart checks that a store keeps big payloads apart and deletes them
// with their runs: stored counts the payloads stored apart (rows of a table,
// objects of a bucket), and purged is called after each deletion, before
// counting (an object store's are deleted after the runs' transaction).
// st must be fresh, with its threshold at most 256 KiB.
func PayloadsApart(t *testing.T, st store.Store, stored func() int) {
	e := &env{t: t, ctx: t.Context(), st: st, clk: NewClock(epoch)}
	if n := stored(); n != 0 {
		t.Fatalf("a fresh store holds %d payloads apart", n)
	}
	smallRun := e.create(withWorkflow("other"), func(p *store.RunCreateParams) { p.Input = []byte(`"small"`) })
	if n := stored(); n != 0 {
		t.Fatalf("a small input was stored apart (%d payloads)", n)
	}
	mk := func(tag string) *store.Run {
		r := e.create(func(p *store.RunCreateParams) { p.Input = bigJSON(tag, 300<<10) })
		cr := e.claimOne(r.ID)
		e.checkpoint(cr, store.CheckpointParams{Status: store.StatusSucceeded, Output: bigJSON(tag+"-out", 300<<10),
			Ops: []*store.Op{e.doneStep(0, "s", string(bigJSON(tag+"-res", 300<<10))), e.doneStep(1, "t", `"small"`)},
			KV:  []store.KVWrite{{Key: "same", Value: bigJSON(tag, 300<<10)}}}) // the input's bytes: stored once
		return r
	}
	a, b := mk("a"), mk("b")
	if n := stored(); n != 6 {
		t.Fatalf("two runs with 3 distinct big payloads each hold %d payloads apart, want 6", n)
	}
	list, err := st.RunList(e.ctx, &store.RunListParams{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range list.Runs {
		switch r.ID {
		case a.ID, b.ID:
			if r.Input != nil || r.Output != nil {
				t.Fatalf("RunList loaded the payloads of run %s (%d and %d bytes)", r.ID, len(r.Input), len(r.Output))
			}
		case smallRun.ID:
			wantPayload(t, "listed small input", r.Input, []byte(`"small"`))
		}
	}
	del := st.(store.RunDeleter)
	deleted, err := del.RunDelete(e.ctx, &store.RunDeleteParams{Namespace: ns, Ref: a.ID})
	if err != nil {
		t.Fatalf("RunDelete: %v", err)
	}
	if deleted.Input != nil {
		t.Fatalf("RunDelete returned a reference as the input: %q", deleted.Input)
	}
	if n := stored(); n != 3 {
		t.Fatalf("after deleting one of two runs, %d payloads apart are left, want 3", n)
	}
	wantPayload(t, "the other run's input", e.get(b.ID).Input, bigJSON("b", 300<<10))
	e.clk.Advance(time.Hour)
	purged, err := del.RunsPurge(e.ctx, &store.RunsPurgeParams{Namespace: ns, FinishedBefore: e.clk.Now()})
	if err != nil || purged != 1 {
		t.Fatalf("RunsPurge = %d, %v; want the other run purged", purged, err)
	}
	if n := stored(); n != 0 {
		t.Fatalf("after purging every run with payloads apart, %d are left", n)
	}
}

// PayloadLookingLikeReference checks that a small payload (of a codec other
// than JSON) that starts as a reference to a payload stored apart does reads
// back as itself. The remote client's payloads go through a server, which
// takes JSON only: the drivers run it.
func PayloadLookingLikeReference(t *testing.T, st store.Store) {
	e := &env{t: t, ctx: t.Context(), st: st, clk: NewClock(epoch)}
	odd := []byte(store.BlobRefPrefix + "12\x00" + strings.Repeat("ab", 32) + "\x00someone-else")
	r := e.create(func(p *store.RunCreateParams) { p.Input = odd })
	wantPayload(t, "RunGet input", e.get(r.ID).Input, odd)
	cr := e.claimOne(r.ID)
	wantPayload(t, "claimed input", cr.Run.Input, odd)
	e.checkpoint(cr, store.CheckpointParams{Status: store.StatusSucceeded, Output: odd,
		Ops: []*store.Op{e.doneStep(0, "s", string(odd))}})
	wantPayload(t, "output", e.get(r.ID).Output, odd)
	wantPayload(t, "result", e.history(r.ID)[0].Result, odd)
}
