package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/internal/jsonenc"
)

// A run's stream is the ordered list of events its clients watch: what the
// workflow publishes (trellis.Emit) and the run's lifecycle (see the Stream*
// names). Events are written with the checkpoint that follows them, or with the
// store's own change of the run (a cancellation that ends it at once), never on
// their own; each takes the run's next sequence (1, 2, ...). StreamTopic is
// signalled after each commit that added some.

// Lifecycle events of a run's stream (docs/streams.md describes each one's
// data): the engine writes all but run.cancelled, which the store writes too
// when it ends a run itself.
const (
	StreamRunStarted    = "run.started"
	StreamStepCompleted = "step.completed"
	StreamStepFailed    = "step.failed"
	StreamRunWaiting    = "run.waiting"
	StreamRunResumed    = "run.resumed"
	// StreamRunBlocked is the event of a run that blocks (its code no longer
	// matches its history); run.waiting follows its resumption's next wait.
	StreamRunBlocked   = "run.blocked"
	StreamRunSucceeded = "run.succeeded"
	StreamRunFailed    = "run.failed"
	StreamRunCancelled = "run.cancelled"
)

// StreamLifecycle returns the names of every lifecycle event, in the order the
// docs list them, the final ones last. Every list of them in the docs and the
// help texts is checked against it (TestStreamLifecycleListsAgree).
func StreamLifecycle() []string {
	return []string{StreamRunStarted, StreamStepCompleted, StreamStepFailed, StreamRunWaiting, StreamRunResumed,
		StreamRunBlocked, StreamRunSucceeded, StreamRunFailed, StreamRunCancelled}
}

// StreamFinal reports whether name is the name of a run's final event.
func StreamFinal(name string) bool {
	return name == StreamRunSucceeded || name == StreamRunFailed || name == StreamRunCancelled
}

// FinalEvent is the final event of a run that ended with status (terminal):
// run.succeeded with {"result"}, output as its JSON value (an output that is
// not JSON, of another codec, as a base64 string), or run.failed or
// run.cancelled with {"error"}.
func FinalEvent(status Status, output []byte, e *ErrorInfo) StreamWrite {
	if status == StatusSucceeded && bytes.HasPrefix(output, []byte(BlobRefPrefix)) {
		// An output stored apart (package store/blobs): its reader resolves it
		// and makes the event then.
		return StreamWrite{Name: StreamRunSucceeded, Data: append([]byte(FinalResultRefPrefix), output...)}
	}
	if status == StatusSucceeded {
		// Every run's that succeeds: appended as json.Marshal encodes the
		// struct below (package jsonenc).
		if b, ok := jsonenc.AppendRaw(append(make([]byte, 0, 12+len(output)), `{"result":`...), output); ok {
			return StreamWrite{Name: StreamRunSucceeded, Data: append(b, '}')}
		}
	}
	// Structs, not maps: encoding a map sorts its keys by reflection.
	name, v := StreamRunFailed, any(struct {
		Error *ErrorInfo `json:"error"`
	}{e})
	switch status {
	case StatusSucceeded:
		var result any = json.RawMessage(output)
		if !json.Valid(output) {
			result = output
		}
		name, v = StreamRunSucceeded, struct {
			Result any `json:"result"`
		}{result}
	case StatusCancelled:
		name = StreamRunCancelled
	}
	b, _ := json.Marshal(v) // a RawMessage checked valid, bytes and an ErrorInfo always encode
	return StreamWrite{Name: name, Data: b}
}

// BlobRefPrefix starts the reference that stands in a row for a payload
// stored apart (package store/blobs); FinalResultRefPrefix starts the data of
// a final stream event read from a run whose output is stored apart, followed
// by the output's reference.
const (
	BlobRefPrefix        = "\x00trellis-blob\x00"
	FinalResultRefPrefix = "\x00trellis-final\x00"
)

// StreamWrite is a stream event to append (CheckpointParams.Stream).
type StreamWrite struct {
	Name string `json:"name"`
	// Data is the event's JSON value.
	Data []byte `json:"data,omitempty"`
}

// StreamEvent is one event of a run's stream.
type StreamEvent struct {
	// Sequence numbers the run's events from 1, without gaps.
	Sequence int64  `json:"sequence"`
	Name     string `json:"name"`
	// Data is the event's JSON value.
	Data []byte    `json:"data,omitempty"`
	At   time.Time `json:"at"`
}

// StreamReadParams are the parameters of StreamRead.
type StreamReadParams struct {
	Namespace string `json:"namespace"`
	// RunID is the run's ID (not a workflow ID).
	RunID string `json:"run_id"`
	// After is the sequence to read after (0: from the start).
	After int64 `json:"after"`
	// Limit caps the events returned; 0 means 100. At most 1000.
	Limit int `json:"limit,omitempty"`
}

// StreamReadResult is what StreamRead returns.
type StreamReadResult struct {
	Events []*StreamEvent `json:"events"`
	// Last is the sequence of the run's last event when read (After when none).
	Last int64 `json:"last"`
	// Finished reports that the run had finished when read and Events holds
	// every event after After: nothing will follow.
	Finished bool `json:"finished"`
}

// StreamMaxLimit caps StreamReadParams.Limit.
const StreamMaxLimit = 1000

// Validate checks a stream read, wrapping ErrInvalidParams.
func (p *StreamReadParams) Validate() error {
	switch {
	case p.Namespace == "" || p.RunID == "":
		return fmt.Errorf("%w: Namespace and RunID are required", ErrInvalidParams)
	case p.After < 0:
		return fmt.Errorf("%w: After must not be negative", ErrInvalidParams)
	case p.Limit < 0 || p.Limit > StreamMaxLimit:
		return fmt.Errorf("%w: Limit must be between 0 and %d", ErrInvalidParams, StreamMaxLimit)
	}
	return nil
}

// StreamTopic is signalled after each commit that added events to the stream of
// a run (Subscriber).
func StreamTopic(namespace, runID string) string { return "stream:" + namespace + "/" + runID }
