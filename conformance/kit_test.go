package conformance

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// The embedded kit parses, passes its own checks and holds the sixteen
// workflows of issue 36 and the at-most-once step of issue 37, by name, and the workflow retries of issue 37.
func TestKitLoads(t *testing.T) {
	k, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"three_steps", "retries", "step_timeout", "sleep", "event_wait", "approval", "child", "map",
		"select", "cancel", "kv", "emit", "nondeterminism", "job_sum", "takeover", "at_most_once", "recorded", "workflow_retry"}
	for i := range want {
		want[i] = "conformance." + want[i]
	}
	if got := k.Names(); !slices.Equal(got, want) {
		t.Fatalf("cases %v\nwant %v", got, want)
	}
	if k.LeaseSeconds != 5 {
		t.Errorf("lease %d", k.LeaseSeconds)
	}
	if kills := slices.DeleteFunc(slices.Clone(k.Cases), func(c *Case) bool { return !c.Kills() }); len(kills) != 2 ||
		kills[0].Name != "conformance.takeover" || kills[1].Name != "conformance.at_most_once" {
		t.Errorf("cases that kill the worker: %v", kills)
	}
}

// A kit with a mistake is refused, saying where.
func TestKitRefusesMistakes(t *testing.T) {
	for _, tc := range []struct{ edit, want string }{
		{`"format": "trellis.conformance/v1"` + "|" + `"format": "v0"`, "format"},
		{`"expect": {"status": "succeeded", "output": "result=30"}` + "|" + `"expect": {"status": "done"}`, `expect.status "done"`},
		{`{"do": "cancel"}` + "|" + `{"do": "explode"}`, `unknown action "explode"`},
		{`{"check": "recorded"}` + "|" + `{"check": "recorded", "colour": 1}`, `unknown field "colour"`},
		{`{"kind": "now", "done": true, "attempts": 1}` + "|" + `{"kind": "later"}`, `unknown kind "later"`},
		{`{"check": "value", "key": "a", "absent": true}` + "|" + `{"check": "value", "key": "a"}`, "one of value and absent"},
	} {
		old, repl, _ := strings.Cut(tc.edit, "|")
		src := string(KitJSON())
		if !strings.Contains(src, old) {
			t.Fatalf("the kit has no %s", old)
		}
		_, err := Parse([]byte(strings.Replace(src, old, repl, 1)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", repl, err, tc.want)
		}
	}
}

func op(pos int, kind, name string, done bool, result string) Op {
	o := Op{Position: pos, Kind: kind, Name: name, Done: done, Attempts: 1}
	if result != "" {
		o.Result = json.RawMessage(result)
	}
	return o
}

func TestMatchHistory(t *testing.T) {
	k, _ := Load()
	three := k.Case("conformance.three_steps").History
	good := []Op{op(0, "step", "add", true, "3"), op(1, "step", "mul", true, "30.0"), op(2, "step", "format", true, `"result=30"`)}
	if err := MatchHistory(three, good); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ops  []Op
		want string
	}{
		{good[:2], `missing op 3 of 3: want step "format"`},
		{append(slices.Clone(good), op(3, "step", "extra", true, "1")), `unexpected op at position 3: step "extra"`},
		{[]Op{good[0], op(1, "step", "mul", true, "31"), good[2]}, "result 31, want 30"},
		{[]Op{good[0], op(1, "step", "mul", false, ""), good[2]}, "done false, want true"},
		{[]Op{good[1], good[0], good[2]}, "positions not rising"},
	} {
		if err := MatchHistory(three, tc.ops); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v, want an error with %q", err, tc.want)
		}
	}
	// An optional op may be there or not, but not be another.
	job := k.Case("conformance.job_sum").History
	if err := MatchHistory(job, nil); err != nil {
		t.Errorf("no op: %v", err)
	}
	if err := MatchHistory(job, []Op{op(0, "step", "conformance.job_sum", true, "5")}); err != nil {
		t.Errorf("the op: %v", err)
	}
	if err := MatchHistory(job, []Op{op(0, "step", "conformance.job_sum", true, "6")}); err == nil {
		t.Error("a wrong result passed")
	}
}

func TestMaxRunning(t *testing.T) {
	at := func(ms int) *time.Time { v := time.Unix(0, 0).Add(time.Duration(ms) * time.Millisecond); return &v }
	runs := []Run{
		{ID: "a", StartedAt: at(0), FinishedAt: at(10)},
		{ID: "b", StartedAt: at(5), FinishedAt: at(20)},
		{ID: "c", StartedAt: at(10), FinishedAt: at(30)}, // starts as a ends: not with it
		{ID: "d", StartedAt: at(15), FinishedAt: at(16)},
	}
	n, when, err := MaxRunning(runs)
	if err != nil || n != 3 || !when.Equal(*at(15)) {
		t.Fatalf("%d at %v, %v; want 3 at 15ms", n, when, err)
	}
	if _, _, err := MaxRunning([]Run{{ID: "x"}}); err == nil {
		t.Error("a run without times passed")
	}
}

func TestJSONEqual(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		eq   bool
	}{
		{`{"a":1,"b":[1,2]}`, `{"b":[1,2.0],"a":1e0}`, true},
		{`18446744073709551615`, `18446744073709551614`, false},
		{`null`, ``, true},
		{`{"a":null}`, `{}`, false},
		{`"1"`, `1`, false},
	} {
		if got := JSONEqual(json.RawMessage(tc.a), json.RawMessage(tc.b)); got != tc.eq {
			t.Errorf("JSONEqual(%s, %s) = %t", tc.a, tc.b, got)
		}
	}
	if !JSONHas(json.RawMessage(`{"approved":true,"principal":"w"}`), json.RawMessage(`{"approved":true}`)) {
		t.Error("JSONHas missed a member")
	}
}

func TestMatchStream(t *testing.T) {
	k, _ := Load()
	want := k.Case("conformance.emit").Checks[0].Events
	ev := func(name, data string) StreamEvent { return StreamEvent{Event: name, Data: json.RawMessage(data)} }
	good := []StreamEvent{
		ev("run.started", `{"attempt":1,"workflow":"conformance.emit"}`), ev("progress", `{"pct":50}`),
		ev("step.completed", `{"name":"work","attempt":1,"duration_ms":0.02}`), ev("progress", `{"pct":100}`),
		ev("run.succeeded", `{"result":"done"}`),
	}
	if err := MatchStream(want, good); err != nil {
		t.Fatal(err)
	}
	swapped := []StreamEvent{good[0], good[2], good[1], good[3], good[4]}
	if err := MatchStream(want, swapped); err == nil || !strings.Contains(err.Error(), "event 2 is step.completed, want progress") {
		t.Errorf("swapped: %v", err)
	}
}
