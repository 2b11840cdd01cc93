package trellis

import (
	"encoding/json"
	"fmt"
	"strings"
)

// Emit publishes an event named name, with payload encoded as JSON, to the run's
// stream, which clients watch live (Client.Stream, `trellis runs watch`, the
// server's /stream route). The event is saved in the same transaction as the
// run's next checkpoint, after the events of the ops before it, and takes the
// run's next stream sequence; a replay does not publish it again. The stream
// also carries the run's lifecycle (run.started, step.completed, step.failed,
// run.waiting, run.resumed, run.blocked, and a final run.succeeded, run.failed
// or run.cancelled; docs/streams.md): names starting with "run." or "step." are
// reserved for it.
//
// Emit fails, recording nothing, for an empty or reserved name, a payload that
// does not encode, or one above the payload limit (ErrPayloadTooLarge).
func Emit(wc *Context, name string, payload any) error {
	if name == "" || len(name) > maxEmitName || strings.HasPrefix(name, "run.") || strings.HasPrefix(name, "step.") {
		return fmt.Errorf("%w: Emit: the name must be 1 to %d bytes and not start with \"run.\" or \"step.\"; got %q",
			ErrInvalidParams, maxEmitName, name)
	}
	b, err := json.Marshal(payload)
	if err != nil {
		return fmt.Errorf("Emit %q: encoding payload: %w", name, err)
	}
	if limit := wc.rs.MaxPayloadBytes(); len(b) > limit {
		return fmt.Errorf("Emit %q: %w: %d bytes (%slimit %d)", name, ErrPayloadTooLarge, len(b), wc.rs.PayloadLimitOf(), limit)
	}
	wc.rs.Emit(name, b)
	return nil
}

// maxEmitName caps the length of an emitted event's name.
const maxEmitName = 200
