package jsonvalid

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/trellis-dev/trellis/internal/jsonvalid/jsonvalidtest"
)

func TestCheckAccepts(t *testing.T) {
	t.Parallel()
	for _, s := range []string{
		`null`, `true`, `0`, `-1.5e10`, `"x"`, `[]`, `{}`, ` {"a": [1, {"b": null}]} `, "\n\t[1]\r\n",
		`{"a":1,"b":{"a":2},"c":[{"a":1},{"a":1}]}`, // the same name in different objects
		`"h\u00e9 \ud83d\ude00 \u0000"`,             // escapes of code points, a surrogate pair
		`"héllo 😀"`, `{"é":1,"e\u0301":2}`,          // raw UTF-8; names that differ as bytes
		`{"a":1,"A":2}`, // names are case-sensitive
	} {
		if err := Check([]byte(s)); err != nil {
			t.Errorf("Check(%q) = %v, want nil", s, err)
		}
	}
}

func TestCheckRefuses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in              string
		want            string // in the error's text
		dup, utf8, eofs bool
	}{
		{in: "", want: "end of JSON input"},
		{in: "   ", want: "end of JSON input"},
		{in: `{"a":`, want: "end of JSON input"},
		{in: `{"a":1} {}`, want: "after the top-level value"},
		{in: `{"a":1}x`, want: "data after the top-level value (byte 7)"},
		{in: "[1] \xff", want: "data after the top-level value"},
		{in: `{'a':1}`, want: "invalid character"},
		{in: `[1,]`, want: "invalid character"},
		{in: `{"a":1,"a":2}`, want: `duplicate object member name "a" in the object at ""`, dup: true},
		{in: `{"x":{"y":[0,{"k":1,"k":1}]}}`, want: `"k" in the object at "/x/y/1"`, dup: true},
		{in: `{"a":1,"\u0061":2}`, want: `duplicate`, dup: true}, // the same name, escaped
		{in: "\"\xff\"", want: "invalid UTF-8", utf8: true},
		{in: "{\"a\":\"ok\",\"b\":\"x\xc3\"}", want: `invalid UTF-8 at "/b"`, utf8: true},
		{in: "{\"\xfe\":1}", want: "invalid UTF-8", utf8: true},
		{in: "\"\xed\xa0\x80\"", want: "invalid UTF-8", utf8: true}, // a surrogate encoded in UTF-8
		{in: `"\ud800"`, want: "invalid surrogate pair"},            // a lone surrogate
		{in: `"\udc00\ud800"`, want: "invalid surrogate pair"},
		{in: `"\u12"`, want: "invalid escape sequence"},
	} {
		err := Check([]byte(c.in))
		var e *Error
		if !errors.As(err, &e) {
			t.Errorf("Check(%q) = %v, want an *Error", c.in, err)
			continue
		}
		if !strings.Contains(err.Error(), c.want) || e.Duplicate != c.dup || e.InvalidUTF8 != c.utf8 {
			t.Errorf("Check(%q) = %q (duplicate %v, UTF-8 %v), want it to say %q (duplicate %v, UTF-8 %v)",
				c.in, err, e.Duplicate, e.InvalidUTF8, c.want, c.dup, c.utf8)
		}
	}
}

// The error names where: an offset into the input for a syntax or encoding
// error.
func TestCheckSaysWhere(t *testing.T) {
	t.Parallel()
	in := "{\"input\":{\"name\":\"Ad\xff\"}}"
	var e *Error
	if !errors.As(Check([]byte(in)), &e) {
		t.Fatal("accepted")
	}
	if e.Pointer != "/input/name" || e.Offset < 18 || e.Offset > int64(len(in)) {
		t.Fatalf("error %+v: want pointer /input/name and an offset at the bad byte (%d)", e, strings.IndexByte(in, 0xff))
	}
}

// Check is never more lenient than encoding/json with a UTF-8 check and a
// search for duplicate names (jsonvalidtest), nor stricter but for surrogate
// escapes, which encoding/json takes as U+FFFD; it never panics.
func FuzzCheck(f *testing.F) {
	for _, s := range []string{`{"a":1}`, `{"a":1,"a":2}`, "\"\xff\"", `"\ud800"`, `[1,2,{"x":[]}]`, `1 2`, ``,
		`{"a":{"b":1,"b":1}}`, `"\u00e9"`, "\"\xc3\xa9\"", `{"a":"\u0000"}`, `[[[[[[[]]]]]]]`, `-0.0e+5`,
		`{"a":1,"\u0061":2}`, `[{"a":1},{"a":1}]`, `{"a":{"a":{"a":1}}}`, "{\"\xff\":1,\"\xfe\":2}", `{"a":0,"a"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		err := Check(b)
		refused := jsonvalidtest.Refused(b)
		if err == nil {
			if refused {
				t.Fatalf("Check accepted %q, which encoding/json + utf8.Valid refuse or which holds a duplicate name", b)
			}
			return
		}
		var e *Error
		if !errors.As(err, &e) || e.Reason == "" {
			t.Fatalf("Check(%q) = %v: not an *Error with a reason", b, err)
		}
		if e.Duplicate && json.Valid(b) && utf8.Valid(b) && !jsonvalidtest.DuplicateName(b) {
			t.Fatalf("Check(%q) = %v, but the search for duplicates finds none", b, err)
		}
		if !refused && !jsonvalidtest.SurrogateEscape.Match(b) {
			t.Fatalf("Check refused %q (%v), which is valid UTF-8 JSON without duplicate names", b, err)
		}
	})
}

func TestDuplicateNameOracle(t *testing.T) {
	t.Parallel()
	for s, want := range map[string]bool{`{"a":1,"a":2}`: true, `{"a":{"a":1}}`: false, `[{"a":1},{"a":1}]`: false,
		`{"a":[{"b":1,"b":1}]}`: true, `{"a":1,"\u0061":1}`: true, `{"a":{},"b":[],"c":{"a":[1,{"x":1}]}}`: false,
		`{"x":{"y":1},"y":2}`: false, `{"x":[1,2],"x":3}`: true} {
		if got := jsonvalidtest.DuplicateName([]byte(s)); got != want {
			t.Errorf("DuplicateName(%s) = %v, want %v", s, got, want)
		}
	}
}
