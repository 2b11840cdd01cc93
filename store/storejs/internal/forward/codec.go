package forward

import (
	"github.com/trellis-dev/trellis/store"

	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"sort"
	"time"
)

// The wire encoding of parameters and results: JSON, by reflection, so that a
// value arrives exactly as it was sent (reflect.DeepEqual), which
// encoding/json does not promise for the store's records:
//
//   - every exported field of a struct is sent under its Go name; `json` tags
//     and MarshalJSON methods are ignored (they shape the HTTP API's records,
//     and `json:"-"` hides fields a forwarded write needs); zero fields are left
//     out and come back zero;
//   - nil and empty slices and maps stay apart (null, [] or {}); []byte (and
//     json.RawMessage) is base64, so any bytes travel, valid JSON or not; a
//     string that is not UTF-8 travels as {"bytes": base64} (a map key must be
//     UTF-8);
//   - integers are decimal text, parsed back at their own width (no float64
//     on the way); floats are the shortest text that parses back to them (NaN
//     and infinities are refused);
//   - time.Time is RFC 3339 with nanoseconds: the instant and the offset
//     travel, the monotonic reading and the zone's name do not (a UTC time comes
//     back as time.UTC; another zone as a fixed zone of the same offset);
//   - a pointer to a struct held more than once in the value (a
//     RunCreateResult's Claimed.Run is its Run) arrives as one pointer again:
//     {"@id": n, "@v": value} the first time, {"@ref": n} after;
//   - a value of interface type error travels as its code and message
//     (errors.Is keeps matching the store sentinel, see Error); another
//     interface, a non-nil func or chan, an unexported field, or a complex
//     number is refused with an error naming where it is: such a value cannot
//     be rebuilt on the other side, and dropping it silently would change the
//     write; but a store.IdempotencyRecord's Response func is left out when
//     the record names its renderer (Renderer), and rebuilt from it on arrival
//     (RebuildResponse).

var (
	timeType  = reflect.TypeFor[time.Time]()
	errorType = reflect.TypeFor[error]()

	idemRecordType = reflect.TypeFor[store.IdempotencyRecord]()
)

// Marshal encodes v in the wire encoding.
func Marshal(v any) ([]byte, error) {
	rv := reflect.ValueOf(v)
	e := &encoder{shared: sharedPointers(rv)}
	return e.appendValue(make([]byte, 0, 512), rv, typeName(v))
}

// Unmarshal decodes data, in the wire encoding, into the value v points to.
func Unmarshal(data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("forward: decoding into %T: not a non-nil pointer", v)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return fmt.Errorf("forward: decoding %s: %w", rv.Type().Elem(), err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("forward: decoding %s: data after the value", rv.Type().Elem())
	}
	d := &decoder{}
	return d.decodeValue(tree, rv.Elem(), rv.Type().Elem().String())
}

func typeName(v any) string {
	if v == nil {
		return "nil"
	}
	return reflect.TypeOf(v).String()
}

// sortedKeys returns obj's keys in order: an error names the first bad one,
// the same one every time.
func sortedKeys(obj map[string]any) []string {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
