package trellis_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis"
)

// TestRecordsJSON: the records a client returns marshal with snake_case names and
// payloads as JSON values (an approval's details too), not base64; a payload of
// another codec is {"$base64": ...}.
func TestRecordsJSON(t *testing.T) {
	t.Parallel()
	type details struct {
		Amount int `json:"amount"`
	}
	release := make(chan struct{})
	wf := trellis.NewWorkflow("records", func(wc *trellis.Context, in map[string]int) (int, error) {
		d, err := trellis.Approval(wc, "ok", trellis.ApprovalOptions{Subject: "pay", Details: details{Amount: in["amount"]}})
		if err != nil || !d.Approved {
			return 0, err
		}
		return trellis.Step(wc, "pay", func(context.Context) (int, error) { <-release; return in["amount"], nil })
	})
	c := setup(t, wf)
	ctx := ctxT(t)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctx, c, wf, map[string]int{"amount": 12}, trellis.StartOptions{ID: "rec-1"}))
	waitStatus(t, c, "rec-1", trellis.StatusWaiting)
	list := must[*trellis.ApprovalList](t)(c.Approvals(ctx, trellis.ApprovalFilter{Run: h.RunID()}))
	if len(list.Approvals) != 1 {
		t.Fatalf("approvals %+v", list.Approvals)
	}
	b, _ := json.Marshal(list)
	if !strings.Contains(string(b), `"details":{"amount":12}`) || !strings.Contains(string(b), `"run_id":"`+h.RunID()+`"`) {
		t.Fatalf("approval list JSON %s: want details as a JSON object and run_id", b)
	}
	if _, err := c.Approve(ctx, list.Approvals[0].ID, "alice", ""); err != nil {
		t.Fatal(err)
	}
	close(release)
	mustResult(t, h)
	run := must[*trellis.Run](t)(c.Get(ctx, "rec-1"))
	b, _ = json.Marshal(run)
	for _, want := range []string{`"input":{"amount":12}`, `"output":12`, `"workflow_id":"rec-1"`, `"status":"succeeded"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("run JSON %s: want %s", b, want)
		}
	}
	if strings.Contains(string(b), "sequence") {
		t.Errorf("run JSON %s shows the storage sequence", b)
	}
	ops := must[[]*trellis.Op](t)(c.History(ctx, "rec-1"))
	b, _ = json.Marshal(ops)
	if !strings.Contains(string(b), `"kind":"approval"`) || !strings.Contains(string(b), `"result":12`) {
		t.Errorf("history JSON %s", b)
	}
	page := must[*trellis.RunPage](t)(c.List(ctx, trellis.ListOptions{Limit: 1}))
	b, _ = json.Marshal(page)
	if !strings.HasPrefix(string(b), `{"runs":[`) {
		t.Errorf("page JSON %s", b)
	}
	for in, want := range map[string]string{"\xff\x00": `{"$base64":"/wA="}`, "plain text": `{"$base64":"cGxhaW4gdGV4dA=="}`, "": `null`} {
		if got, _ := json.Marshal(trellis.Payload(in)); string(got) != want {
			t.Errorf("Payload(%q) = %s, want %s", in, got, want)
		}
	}
	var back struct{ P trellis.Payload }
	if err := json.Unmarshal([]byte(`{"P":{"a":[1,2]}}`), &back); err != nil || string(back.P) != `{"a":[1,2]}` {
		t.Errorf("Payload round trip: %s, %v", back.P, err)
	}
}
