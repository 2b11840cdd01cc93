package forward_test

import (
	"encoding/json"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storejs/internal/forward"
)

type inner struct {
	N int8
	S []string
}

type Embedded struct{ E string }

type kinds struct {
	Embedded
	B       bool
	I       int64
	U       uint64
	F       float64
	F32     float32
	S       string
	Bin     string
	Raw     json.RawMessage
	Bytes   []byte
	Empty   []byte
	NilList []int
	List    []int
	Arr     [2]uint16
	M       map[string]*inner
	IntKeys map[int32]bool
	EmptyM  map[string]int
	P       *inner
	PP      **string
	T       time.Time
	TP      *time.Time
	D       time.Duration
	Dur     store.Duration // has a MarshalJSON, which the wire ignores
	Err     error
	Hidden  string `json:"-"`
	Renamed string `json:"other"`
	Fn      func() // nil: not sent
}

func TestCodecRoundTrip(t *testing.T) {
	t.Parallel()
	s := "deep"
	ps := &s
	at := time.Date(2031, 12, 31, 23, 59, 59, 999999999, time.UTC)
	in := kinds{
		Embedded: Embedded{"e"}, B: true, I: math.MinInt64, U: math.MaxUint64, F: 0.1, F32: 1.5e-7,
		S: "ü\x00\"\\\n\u2028", Bin: "\xff\xfe not UTF-8", Raw: json.RawMessage("not json {"), Bytes: []byte{0, 255}, Empty: []byte{},
		List: []int{}, Arr: [2]uint16{1, 65535},
		M:       map[string]*inner{"a": {N: -8, S: []string{""}}, "nil": nil},
		IntKeys: map[int32]bool{-3: true}, EmptyM: map[string]int{},
		P: &inner{}, PP: &ps, T: at, TP: &at, D: -time.Nanosecond, Dur: store.Duration(time.Hour),
		Err: store.ErrRunExists, Hidden: "kept", Renamed: "r",
	}
	data, err := forward.Marshal(&in)
	if err != nil {
		t.Fatal(err)
	}
	var out *kinds
	if err := forward.Unmarshal(data, &out); err != nil {
		t.Fatalf("Unmarshal %s: %v", data, err)
	}
	if !errors.Is(out.Err, store.ErrRunExists) || out.Err.Error() != store.ErrRunExists.Error() {
		t.Fatalf("Err = %v", out.Err)
	}
	out.Err = in.Err
	if !reflect.DeepEqual(out, &in) {
		t.Fatalf("round trip:\n got %#v\nwant %#v\nwire %s", out, &in, data)
	}
	if out.T.Location() != time.UTC {
		t.Fatalf("a UTC time came back in %v", out.T.Location())
	}
}

// TestCodecRefuses: what cannot be rebuilt on the other side is an error that
// names where it is, on either side.
func TestCodecRefuses(t *testing.T) {
	t.Parallel()
	type withAny struct{ V any }
	type withUnexported struct{ x int }
	for name, v := range map[string]any{
		"func":       nil, // set below
		"any":        withAny{V: 1},
		"unexported": withUnexported{x: 1},
		"nan":        math.NaN(),
		"chan":       make(chan int),
		"bad key":    map[string]int{"\xff": 1},
	} {
		if name == "func" {
			v = &store.RunCreateParams{Idempotency: &store.IdempotencyRecord{Key: "k", Fingerprint: []byte{1},
				Response: func(any) (int, []byte, error) { return 0, nil, nil }}}
		}
		_, err := forward.Marshal(v)
		if err == nil {
			t.Errorf("%s: Marshal did not refuse", name)
			continue
		}
		if name == "func" && !strings.Contains(err.Error(), "Idempotency.Response") {
			t.Errorf("func: %v does not name the field", err)
		}
	}
	for name, c := range map[string]struct {
		data string
		into any
	}{
		"unknown field": {`{"Status":"running","Shiny":1}`, new(store.CheckpointParams)},
		"wrong type":    {`{"Status":1}`, new(store.CheckpointParams)},
		"overflow":      {`{"N":300}`, new(inner)},
		"trailing":      {`{} {}`, new(inner)},
		"bad base64":    {`{"Bytes":"%%"}`, new(kinds)},
		"bad time":      {`{"T":"yesterday"}`, new(kinds)},
		"bad error":     {`{"Err":"boom"}`, new(kinds)},
		"not a pointer": {`{}`, inner{}},
	} {
		if err := forward.Unmarshal([]byte(c.data), c.into); err == nil {
			t.Errorf("%s: Unmarshal did not refuse", name)
		}
	}
}

// FuzzUnmarshal: no input makes the decoder panic, and what it accepts
// encodes and decodes to the same value.
func FuzzUnmarshal(f *testing.F) {
	f.Add(`{"I":"1","M":{"a":{"N":3}},"T":"2031-01-01T00:00:00Z"}`)
	f.Add(`{"Err":{"code":"run_exists","message":"m"},"Bytes":"AAE="}`)
	f.Add(`null`)
	f.Add(`{"Bin":{"bytes":"//4="},"S":"a\\u0000"}`)
	f.Fuzz(func(t *testing.T, data string) {
		var v kinds
		if forward.Unmarshal([]byte(data), &v) != nil {
			return
		}
		again, err := forward.Marshal(&v)
		if err != nil {
			t.Fatalf("re-encoding an accepted value: %v", err)
		}
		var w kinds
		if err := forward.Unmarshal(again, &w); err != nil {
			t.Fatalf("decoding %s: %v", again, err)
		}
		if v.Err != nil {
			v.Err, w.Err = nil, nil
		}
		if !reflect.DeepEqual(v, w) {
			t.Fatalf("not stable:\n%#v\n%#v", v, w)
		}
	})
}

// TestCodecKeepsSharedPointers: a struct pointer held twice arrives as one
// pointer held twice (RunCreateResult's Claimed.Run is its Run); a cycle
// travels too.
func TestCodecKeepsSharedPointers(t *testing.T) {
	t.Parallel()
	run := &store.Run{ID: "r1"}
	in := &store.RunCreateResult{Run: run, Created: true, Claimed: &store.ClaimedRun{Run: run, LeaseToken: 3}}
	data, err := forward.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out *store.RunCreateResult
	if err := forward.Unmarshal(data, &out); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if out.Claimed.Run != out.Run || !reflect.DeepEqual(out, in) {
		t.Fatalf("shared pointer lost: %s", data)
	}

	type node struct {
		Name string
		Next *node
	}
	a := &node{Name: "a"}
	a.Next = &node{Name: "b", Next: a}
	data, err = forward.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var got *node
	if err := forward.Unmarshal(data, &got); err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	if got.Next.Next != got || got.Next.Name != "b" {
		t.Fatalf("cycle lost: %s", data)
	}
	for name, bad := range map[string]string{
		"unknown ref": `{"Run":{"@ref":9}}`,
		"bad id":      `{"Run":{"@id":"x","@v":{}}}`,
		"twice":       `{"Run":{"@id":1,"@v":{}},"Claimed":{"Run":{"@id":1,"@v":{}}}}`,
	} {
		var r *store.RunCreateResult
		if err := forward.Unmarshal([]byte(bad), &r); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
