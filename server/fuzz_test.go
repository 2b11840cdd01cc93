package server

import (
	"bytes"
	"errors"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"
)

// The body decoders either decode a value or refuse with ErrInvalidArgument;
// they never panic nor accept trailing data. (CI runs the seed corpus; `go test
// -fuzz FuzzDecodeBodies ./server` explores.)
func FuzzDecodeBodies(f *testing.F) {
	for _, s := range []string{`{"workflow":"echo","input":{"a":[1,2]},"id":"x","queue":"q","priority":3,"reuse":"reject"}`,
		`{"workflow":"echo","deadline":"2030-01-01T00:00:00Z","available_at":"2030-01-01T00:00:00+02:00"}`,
		`{"name":"go","payload":"hi"}`, `{"comment":"ok"}`, `{"step":"charge"}`, `{}`, ``, `null`, `[]`,
		`{"workflow":1}`, `{"workflow":"a"} x`, `{"workflow":"a/b"}`, "{\"id\":\"\x00\"}", `{"input":`,
		`{"name":"ci","grants":[{"role":"reader","namespace":"*","queue":"q"}]}`, `{"name":"x","grants":[{"role":"root"}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, v := range []any{&StartRequest{}, &EventRequest{}, &DecideRequest{}, &ResetRequest{}, &TokenRequest{}} {
			err := decodeJSON(bytes.NewReader(data), true, v)
			if err != nil && !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("decoding %q: error %v is not ErrInvalidArgument", data, err)
			}
			if start, ok := v.(*StartRequest); ok && err == nil {
				if o, err := start.options(); err == nil && (checkRef("workflow", start.Workflow) != nil || o.Deadline.Location() != time.UTC) {
					t.Fatalf("options accepted %+v", start)
				}
			}
		}
	})
}

// The query parser refuses unknown, repeated and malformed parameters with
// ErrInvalidArgument and never panics.
func FuzzParseQuery(f *testing.F) {
	for _, s := range []string{"status=pending,running&workflow=a&queue=q&limit=10", "created_after=2020-01-01T00:00:00Z",
		"limit=0", "limit=99999999999999999999", "position=3", "workflow_id=a", "page_token=%zz", "a=1", "wait=30s", "wait=-1s", "status=&status="} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r := httptest.NewRequest("GET", "/v1/namespaces/default/runs", nil)
		r.URL = &url.URL{Path: r.URL.Path, RawQuery: raw}
		q := parseQuery(r, append(append(runListParams, waitParams...), childParams...))
		q.list("status")
		q.time("created_after")
		if n := q.limit("limit", 1000); n < 0 || n > 1000 {
			t.Fatalf("limit %d accepted from %q", n, raw)
		}
		if d := q.duration("wait", time.Minute); d < 0 || d > time.Minute {
			t.Fatalf("wait %s accepted from %q", d, raw)
		}
		if q.err != nil && !errors.Is(q.err, ErrInvalidArgument) {
			t.Fatalf("%q: %v", raw, q.err)
		}
	})
}
