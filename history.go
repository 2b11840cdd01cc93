package trellis

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
)

// HistoryFormat is the format tag of a RecordedHistory: "trellis.history/v1".
// A later version that changes the meaning of a field gets a new tag;
// ParseHistory refuses tags it does not know. See docs/history-format.md.
const HistoryFormat = "trellis.history/v1"

// RecordedHistory is a run and its history as `trellis runs history RUN --json`
// prints them and Client.ExportHistory returns them: a documented, versioned JSON
// document (docs/history-format.md) that trellistest.Replay replays against
// workflow code without a store. Its run and ops are the client's records.
type RecordedHistory struct {
	// Format is HistoryFormat.
	Format string      `json:"format"`
	Run    Run         `json:"run"`
	Ops    []HistoryOp `json:"ops"`
}

// HistoryOp is one op of a RecordedHistory, in position order.
type HistoryOp struct {
	Op
	// Children are the child runs a child op started (one, or a Map's items in
	// order), as they were when the history was exported: a replay of a Map
	// reads its items' outcomes from them.
	Children []HistoryChild `json:"children,omitempty"`
}

// HistoryChild is a child run of a child op.
type HistoryChild struct {
	ID       string     `json:"id"`
	Workflow string     `json:"workflow"`
	Status   Status     `json:"status"`
	Output   Payload    `json:"output,omitempty"`
	Error    *ErrorInfo `json:"error,omitempty"`
}

// Payload is an encoded value (an input, output, result or event payload). In
// JSON it is the value itself when it is JSON in valid UTF-8, and
// {"$base64": "..."} otherwise (other codecs' bytes; JSON with invalid UTF-8,
// which a server stored before it refused such payloads and which strict
// parsers reject; and JSON of exactly that shape, which would be ambiguous).
// Insignificant whitespace of a JSON payload is not kept.
type Payload []byte

const payloadBase64Key = "$base64"

// MarshalJSON implements json.Marshaler.
func (p Payload) MarshalJSON() ([]byte, error) {
	if len(p) == 0 {
		return []byte("null"), nil
	}
	// The fast path: jsontext checks (in valid UTF-8) and compacts in one pass,
	// several times faster than encoding/json's scanner, which the caller's
	// encoding/json runs over the answer once more anyway: a 50 MiB payload
	// crosses here several times per run. A copy: Compact works in place.
	if v := jsontext.Value(bytes.Clone(p)); v.Compact(jsontext.AllowInvalidUTF8(false)) == nil && !isBase64Wrapper(v) {
		return v, nil
	}
	// What jsontext refuses and encoding/json takes (an escape of a lone
	// surrogate, "\ud800") or neither does.
	if json.Valid(p) && utf8.Valid(p) && !isBase64Wrapper(p) {
		var buf bytes.Buffer
		if err := json.Compact(&buf, p); err != nil {
			return nil, err
		}
		return buf.Bytes(), nil
	}
	return json.Marshal(map[string]string{payloadBase64Key: base64.StdEncoding.EncodeToString(p)})
}

// UnmarshalJSON implements json.Unmarshaler.
func (p *Payload) UnmarshalJSON(b []byte) error {
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		*p = nil
		return nil
	}
	if isBase64Wrapper(b) {
		var w map[string]string
		if err := json.Unmarshal(b, &w); err != nil {
			return err
		}
		raw, err := base64.StdEncoding.DecodeString(w[payloadBase64Key])
		if err != nil {
			return fmt.Errorf("decoding %s payload: %w", payloadBase64Key, err)
		}
		*p = raw
		return nil
	}
	// As MarshalJSON, jsontext first; encoding/json for what it refuses and
	// encoding/json takes.
	if v := jsontext.Value(bytes.Clone(b)); v.Compact() == nil {
		*p = Payload(v)
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return err
	}
	*p = buf.Bytes()
	return nil
}

// isBase64Wrapper reports whether b is a JSON object whose one member is
// "$base64" with a string value.
func isBase64Wrapper(b []byte) bool {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || b[0] != '{' {
		return false
	}
	var w map[string]json.RawMessage
	if json.Unmarshal(b, &w) != nil || len(w) != 1 {
		return false
	}
	v, ok := w[payloadBase64Key]
	return ok && len(v) > 0 && v[0] == '"'
}

// ExportHistory returns a run (by run ID or workflow ID) and its history in the
// RecordedHistory format, with the child runs of its child ops.
func (c *Client) ExportHistory(ctx context.Context, ref string) (*RecordedHistory, error) {
	return callV(ctx, c, ClientCall{Method: "ExportHistory", Ref: ref}, func(ctx context.Context) (*RecordedHistory, error) { return c.b.exportHistory(ctx, ref) })
}

// opKinds are the op kinds of format v1.
var opKinds = map[OpKind]bool{
	OpStep: true, OpNow: true, OpUUID: true, OpRandom: true, OpPatch: true, OpSet: true,
	OpDelete: true, OpTimer: true, OpEvent: true, OpApproval: true, OpChild: true, OpSelect: true,
	OpEmit: true,
}

// ParseHistory decodes and checks a RecordedHistory (the output of `trellis runs
// history RUN --json`). It refuses unknown format tags, unknown op kinds and ops
// out of position order, with an error wrapping ErrHistoryFormat.
func ParseHistory(data []byte) (*RecordedHistory, error) {
	var h RecordedHistory
	if err := json.Unmarshal(data, &h); err != nil {
		return nil, fmt.Errorf("parsing history: %w: %v", ErrHistoryFormat, err)
	}
	if err := h.validate(); err != nil {
		return nil, fmt.Errorf("parsing history: %w: %v", ErrHistoryFormat, err)
	}
	return &h, nil
}

func (h *RecordedHistory) validate() error {
	switch {
	case h.Format != HistoryFormat:
		return fmt.Errorf("format %q (want %q)", h.Format, HistoryFormat)
	case h.Run.Workflow == "":
		return errors.New("run.workflow is empty")
	case h.Run.ID == "":
		return errors.New("run.id is empty")
	}
	last := -1
	for i, op := range h.Ops {
		switch {
		case op.Position <= last:
			return fmt.Errorf("ops[%d]: position %d after %d", i, op.Position, last)
		case !opKinds[op.Kind]:
			return fmt.Errorf("ops[%d]: unknown kind %q", i, op.Kind)
		case op.Attempts < 0:
			return fmt.Errorf("ops[%d]: negative attempts", i)
		}
		last = op.Position
	}
	return nil
}
