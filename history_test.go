package trellis_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/trellis-dev/trellis"
)

func TestExportHistoryRoundTrips(t *testing.T) {
	t.Parallel()
	calls := 0
	wf := trellis.NewWorkflow("export", func(wc *trellis.Context, in int) (int, error) {
		n, err := trellis.Step(wc, "flaky", func(ctx context.Context) (int, error) {
			calls++
			if calls == 1 {
				return 0, errors.New("first attempt fails")
			}
			return in * 2, nil
		})
		if err != nil {
			return 0, err
		}
		if err := wc.Set("raw", []byte{0xff, 0x00}); err != nil {
			return 0, err
		}
		return n, nil
	})
	c := setup(t, wf)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 21, trellis.StartOptions{ID: "exp-1"}))
	if got := mustResult(t, h); got != 42 {
		t.Fatalf("result %d", got)
	}
	exp, err := c.ExportHistory(ctxT(t), "exp-1")
	if err != nil {
		t.Fatal(err)
	}
	if exp.Format != trellis.HistoryFormat || exp.Run.ID != h.RunID() || exp.Run.Workflow != "export" ||
		string(exp.Run.Input) != "21" || string(exp.Run.Output) != "42" || len(exp.Ops) != 2 {
		t.Fatalf("export %+v", exp)
	}
	step := exp.Ops[0]
	if step.Kind != "step" || step.Attempts != 2 || len(step.AttemptLog) != 1 || step.AttemptLog[0].Error.Message != "first attempt fails" {
		t.Errorf("step op %+v", step)
	}
	b, err := json.Marshal(exp)
	if err != nil {
		t.Fatal(err)
	}
	back, err := trellis.ParseHistory(b)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := json.Marshal(back)
	if !bytes.Equal(b, b2) {
		t.Errorf("round trip changed the document:\n%s\n%s", b, b2)
	}
	if _, err := c.ExportHistory(ctxT(t), "nope"); !errors.Is(err, trellis.ErrRunNotFound) {
		t.Errorf("unknown run: %v", err)
	}
}

func TestPayloadJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in         trellis.Payload
		want, back string // back: the payload decoded again
	}{
		{trellis.Payload(`{"a": 1}`), `{"a":1}`, `{"a":1}`},
		{trellis.Payload(`"x"`), `"x"`, `"x"`},
		{trellis.Payload("not json"), `{"$base64":"bm90IGpzb24="}`, "not json"},
		{trellis.Payload{0xff}, `{"$base64":"/w=="}`, "\xff"},
		{trellis.Payload("\"\xff\""), `{"$base64":"Iv8i"}`, "\"\xff\""},                                           // JSON with invalid UTF-8: strict parsers refuse it
		{trellis.Payload(`{"$base64":"AA=="}`), `{"$base64":"eyIkYmFzZTY0IjoiQUE9PSJ9"}`, `{"$base64":"AA=="}`},   // ambiguous: wrapped
		{trellis.Payload(` [1, "a b", {"a": 1, "a": 2}] `), `[1,"a b",{"a":1,"a":2}]`, `[1,"a b",{"a":1,"a":2}]`}, // what encoding/json takes: kept
		{trellis.Payload(`"\ud800 \u00e9"`), `"\ud800 \u00e9"`, `"\ud800 \u00e9"`},                                // a lone surrogate's escape, as encoding/json takes it
		{nil, `null`, ""},
	} {
		b, err := json.Marshal(tc.in)
		if err != nil || string(b) != tc.want {
			t.Errorf("marshal %q = %s, %v; want %s", tc.in, b, err, tc.want)
			continue
		}
		var back trellis.Payload
		if err := json.Unmarshal(b, &back); err != nil || string(back) != tc.back {
			t.Errorf("unmarshal %s = %q, %v; want %q", b, back, err, tc.back)
		}
	}
}

func TestParseHistoryRejects(t *testing.T) {
	t.Parallel()
	for name, doc := range map[string]string{
		"not json":       `{`,
		"other format":   `{"format":"trellis.history/v9","run":{"id":"r","workflow":"w"},"ops":[]}`,
		"no workflow":    `{"format":"trellis.history/v1","run":{"id":"r"},"ops":[]}`,
		"unknown kind":   `{"format":"trellis.history/v1","run":{"id":"r","workflow":"w"},"ops":[{"position":0,"kind":"teleport"}]}`,
		"out of order":   `{"format":"trellis.history/v1","run":{"id":"r","workflow":"w"},"ops":[{"position":1,"kind":"now"},{"position":0,"kind":"now"}]}`,
		"bad base64":     `{"format":"trellis.history/v1","run":{"id":"r","workflow":"w","input":{"$base64":"!!"}},"ops":[]}`,
		"wrong field ty": `{"format":"trellis.history/v1","run":{"id":"r","workflow":"w","version":"x"},"ops":[]}`,
	} {
		if _, err := trellis.ParseHistory([]byte(doc)); !errors.Is(err, trellis.ErrHistoryFormat) {
			t.Errorf("%s: err = %v, want ErrHistoryFormat", name, err)
		}
	}
}

// FuzzParseHistory checks that the decoder never panics and that what it accepts
// encodes to a document it decodes to the same value.
func FuzzParseHistory(f *testing.F) {
	f.Add([]byte(`{"format":"trellis.history/v1","run":{"id":"r","workflow":"w","input":{"$base64":"/w=="},"output":[1,2]},"ops":[{"position":0,"kind":"step","name":"s","done":true,"result":{"a":1},"attempts":2,"attempt_log":[{"attempt":1,"error":{"message":"x"}}]},{"position":2,"kind":"child","children":[{"id":"r.2","status":"succeeded","output":"o"}]}]}`))
	f.Add([]byte(`{"format":"trellis.history/v1","run":{"id":"r","workflow":"w"},"ops":[]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		h, err := trellis.ParseHistory(data)
		if err != nil {
			return
		}
		b, err := json.Marshal(h)
		if err != nil {
			t.Fatalf("encoding an accepted history: %v", err)
		}
		h2, err := trellis.ParseHistory(b)
		if err != nil {
			t.Fatalf("re-parsing %s: %v", b, err)
		}
		b2, _ := json.Marshal(h2)
		if !bytes.Equal(b, b2) {
			t.Fatalf("not stable:\n%s\n%s", b, b2)
		}
	})
}
