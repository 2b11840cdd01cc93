package engine

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// The lifecycle events appended by hand (package jsonenc) are the bytes
// json.Marshal makes of their structs.
func TestLifecycleEventsAsMarshalled(t *testing.T) {
	start := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	for _, name := range []string{"s0", "charge <card> & \"notify\"", "é"} {
		for _, d := range []time.Duration{0, time.Microsecond, 1500 * time.Microsecond, 3 * time.Hour} {
			sc := &stepCall{name: name, attempt: 2, attemptStart: start}
			got := sc.completedEvent(start.Add(d))
			want := lifecycle(store.StreamStepCompleted, stepEvent{Name: name, Attempt: 2, DurationMS: sc.duration(start.Add(d))})
			if got.Name != want.Name || string(got.Data) != string(want.Data) {
				t.Fatalf("completedEvent = %s %s, want %s %s", got.Name, got.Data, want.Name, want.Data)
			}
		}
		rs := &RunState{run: &store.Run{Workflow: name, Attempts: 3}, startPending: true}
		var q queued
		rs.addStarted(&q, store.StatusRunning)
		want := lifecycle(store.StreamRunStarted, startedEvent{Attempt: 3, Workflow: name})
		if len(q.stream) != 1 || q.stream[0].Name != want.Name || string(q.stream[0].Data) != string(want.Data) {
			t.Fatalf("run.started = %+v, want %s %s", q.stream, want.Name, want.Data)
		}
	}
	for _, out := range []string{`"done"`, `{"a": [1, 2], "h": "<&>"}`, `42`} {
		got := store.FinalEvent(store.StatusSucceeded, []byte(out), nil)
		want, _ := json.Marshal(struct {
			Result any `json:"result"`
		}{json.RawMessage(out)})
		if got.Name != store.StreamRunSucceeded || string(got.Data) != string(want) {
			t.Fatalf("FinalEvent(%s) = %s %s, want %s", out, got.Name, got.Data, want)
		}
	}
}
