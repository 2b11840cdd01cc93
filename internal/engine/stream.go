package engine

import (
	"encoding/json"
	"time"

	"github.com/trellis-dev/trellis/internal/jsonenc"
	"github.com/trellis-dev/trellis/store"
)

// The run's stream (store/stream.go): events the workflow emits and the run's
// lifecycle, queued with the ops they go with and written by the same checkpoint.
// An event is queued when its op is recorded, never on replay, so a replay
// publishes nothing twice; an event whose checkpoint never committed was never
// published, and the replay that re-runs its op queues it again.

// Emit queues an event of the workflow's own for the run's stream, recorded as an
// op (kind emit) so that a replay skips it. data is JSON.
func (rs *RunState) Emit(name string, data []byte) {
	rs.checkUnwind()
	pos, rec := rs.next(store.OpEmit, name)
	if rec != nil {
		return
	}
	at := rs.now()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	rs.pending.ops = append(rs.pending.ops, &store.Op{Position: pos, Kind: store.OpEmit, Name: name,
		Done: true, Attempts: 1, StartedAt: at, FinishedAt: &at})
	rs.pending.stream = append(rs.pending.stream, store.StreamWrite{Name: name, Data: data})
}

// lifecycle encodes a lifecycle event.
func lifecycle(name string, v any) store.StreamWrite {
	b, _ := json.Marshal(v) // the values below always encode
	return store.StreamWrite{Name: name, Data: b}
}

// addStarted puts the execution's first lifecycle event first in q when q is
// its first checkpoint: run.started for the run's first execution (no history),
// run.resumed for a later one (after a wait, a hand-back, a crash or a
// resumption of a blocked run), which replays the history. A hand-back that
// records nothing leaves it to the next execution, which writes it instead.
func (rs *RunState) addStarted(q *queued, status store.Status) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if !rs.startPending || status == store.StatusPending && len(q.ops) == 0 {
		return
	}
	rs.startPending = false
	var ev store.StreamWrite
	if rs.replayed == 0 {
		// Every run's: appended as json.Marshal encodes a startedEvent.
		b := make([]byte, 0, 32+len(rs.run.Workflow))
		b = jsonenc.AppendInt(append(b, `{"attempt":`...), rs.run.Attempts)
		b = jsonenc.AppendString(append(b, `,"workflow":`...), rs.run.Workflow)
		ev = store.StreamWrite{Name: store.StreamRunStarted, Data: append(b, '}')}
	} else {
		ev = lifecycle(store.StreamRunResumed, resumedEvent{Attempt: rs.run.Attempts, Replayed: rs.replayed})
	}
	q.stream = append([]store.StreamWrite{ev}, q.stream...)
}

// stepEvent is the data of step.completed and step.failed.
type stepEvent struct {
	Name       string           `json:"name"`
	Attempt    int              `json:"attempt"`
	DurationMS float64          `json:"duration_ms"`
	Error      *store.ErrorInfo `json:"error,omitempty"`
	// Final is set on the failure that ends the step (no retry follows).
	Final bool `json:"final,omitempty"`
}

func (sc *stepCall) duration(end time.Time) float64 {
	if sc.attemptStart.IsZero() {
		return 0
	}
	return float64(end.Sub(sc.attemptStart).Microseconds()) / 1000
}

func (sc *stepCall) completedEvent(end time.Time) store.StreamWrite {
	ev := stepEvent{Name: sc.name, Attempt: sc.attempt, DurationMS: sc.duration(end)}
	// Every step's: appended as json.Marshal encodes ev (package jsonenc).
	b := make([]byte, 0, 48+len(ev.Name))
	b = jsonenc.AppendString(append(b, `{"name":`...), ev.Name)
	b = jsonenc.AppendInt(append(b, `,"attempt":`...), ev.Attempt)
	b, ok := jsonenc.AppendFloat(append(b, `,"duration_ms":`...), ev.DurationMS)
	if !ok {
		return lifecycle(store.StreamStepCompleted, ev)
	}
	return store.StreamWrite{Name: store.StreamStepCompleted, Data: append(b, '}')}
}

func (sc *stepCall) failedEvent(e *store.ErrorInfo, end time.Time, final bool) store.StreamWrite {
	return lifecycle(store.StreamStepFailed, stepEvent{Name: sc.name, Attempt: sc.attempt, DurationMS: sc.duration(end), Error: e, Final: final})
}

// The data of the other lifecycle events. They are structs, not maps, because
// encoding a map sorts its keys by reflection on every event; the fields are in
// the order a map's keys would encode in, so the JSON is the same.
type (
	startedEvent struct {
		Attempt  int    `json:"attempt"`
		Workflow string `json:"workflow"`
	}
	resumedEvent struct {
		Attempt  int `json:"attempt"`
		Replayed int `json:"replayed"`
	}
	errorEvent struct {
		Error *store.ErrorInfo `json:"error"`
	}
)

// waitingEvent is the data of run.waiting.
type waitingEvent struct {
	Reason string     `json:"reason"`
	WakeAt *time.Time `json:"wake_at,omitempty"`
	Events []string   `json:"events,omitempty"`
}

// MaxPayloadBytes is the limit of an encoded value of the run.
func (rs *RunState) MaxPayloadBytes() int { return rs.limit }

// PayloadLimitOf says whose limit MaxPayloadBytes is, for an error: "queue
// \"q\" " when the run's queue's, else "".
func (rs *RunState) PayloadLimitOf() string { return rs.limitOf }
