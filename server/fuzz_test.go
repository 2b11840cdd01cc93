package server

import (
	"bytes"
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	gotypes "go/types"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/jsonvalid/jsonvalidtest"
)

// The body decoders either decode a value or refuse with ErrInvalidArgument;
// they never panic nor accept trailing data, invalid UTF-8 or a name twice in
// an object (as encoding/json and a search of its tokens tell,
// jsonvalidtest), anywhere in the body, payloads included. Every JSON body of the API is
// fuzzed: the request types of the route table (fuzzedBodies; a handler that
// decodes a type the table does not name fails TestEveryDecodedBodyIsFuzzed).
// (CI fuzzes each target for a few seconds, see .ci/run; `go test -fuzz
// FuzzDecodeBodies ./server` explores longer.)
func FuzzDecodeBodies(f *testing.F) {
	for _, s := range []string{`{"workflow":"echo","input":{"a":[1,2]},"id":"x","queue":"q","priority":3,"reuse":"reject"}`,
		`{"workflow":"echo","deadline":"2030-01-01T00:00:00Z","available_at":"2030-01-01T00:00:00+02:00"}`,
		`{"name":"go","payload":"hi"}`, `{"comment":"ok"}`, `{"step":"charge"}`, `{}`, ``, `null`, `[]`,
		`{"workflow":1}`, `{"workflow":"a"} x`, `{"workflow":"a/b"}`, "{\"id\":\"\x00\"}", `{"input":`,
		`{"name":"ci","grants":[{"role":"reader","namespace":"*","queue":"q"}]}`, `{"name":"x","grants":[{"role":"root"}]}`,
		`{"runs":[{"workflow":"echo","queue":"q"},{"workflow":"a/b","reuse":"never"}]}`, `{"runs":null}`, `{"runs":[1]}`,
		`{"name":"shop","retention":"48h","default_queue":"q","payload_limit":1024}`, `{"retention":"forever"}`,
		`{"retention":"1h","default_queue":null,"payload_limit":-1}`,
		`{"name":"q","paused":true,"concurrency_limit":2,"key_limit":1,"rate_per_second":0.5,"rate_burst":3,"priority":-2,"retry":{"max_attempts":3}}`,
		`{"rate_per_second":1e400}`, `{"concurrency_limit":1.5}`,
		`{"name":"nightly","spec":{"workflow":"echo","cron":"0 3 * * *","time_zone":"Europe/Berlin","overlap":"skip","catchup_window":"10m"},"paused":true}`,
		`{"workflow":"echo","cron":"@every 1s","catchup_window":"soon"}`, `{"spec":{"cron":1}}`,
		`{"start":"2030-01-01T00:00:00Z","end":"2030-01-02T00:00:00Z"}`, `{"start":"yesterday"}`,
		// Invalid UTF-8, surrogate escapes and duplicate names, in envelopes
		// and in payloads, at some depth.
		"{\"workflow\":\"e\xffcho\"}", "{\"workflow\":\"echo\",\"input\":{\"a\":[\"\xc3\"]}}", `{"workflow":"echo","input":"\ud800"}`,
		`{"workflow":"echo","input":"\ud83d\ude00"}`, `{"workflow":"a","workflow":"b"}`, `{"workflow":"echo","input":{"a":1,"\u0061":2}}`,
		`{"runs":[{"workflow":"echo","input":{"x":[{"y":1,"y":1}]}}]}`, `{"name":"go","payload":{"k":{"k":{"k":1}}}}`,
		"{\"name\":\"go\",\"payload\":\"\xed\xa0\x80\"}", `{"comment":"ok","comment":"no"}`,
		`{"name":"s","spec":{"workflow":"echo","cron":"@daily","input":{"a":1,"a":1}}}`} {
		f.Add([]byte(s))
	}
	bodies := fuzzedBodies()
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, typ := range bodies {
			v := reflect.New(typ).Interface()
			err := decodeJSON(bytes.NewReader(data), int64(len(data)), true, v)
			if err != nil && !errors.Is(err, ErrInvalidArgument) {
				t.Fatalf("decoding %q into %s: error %v is not ErrInvalidArgument", data, typ, err)
			}
			if err != nil {
				continue
			}
			if len(bytes.TrimSpace(data)) > 0 && jsonvalidtest.Refused(data) {
				t.Fatalf("decoded %q into %s: invalid JSON, not UTF-8, or a name twice in an object", data, typ)
			}
			var starts []StartRequest
			switch req := v.(type) {
			case *StartRequest:
				starts = []StartRequest{*req}
			case *StartManyRequest:
				starts = req.Runs
			}
			for _, start := range starts {
				if o, err := start.options(); err == nil && (checkRef("workflow", start.Workflow) != nil || o.Deadline.Location() != time.UTC) {
					t.Fatalf("options accepted %+v", start)
				}
			}
		}
	})
}

// fuzzedBodies are the body types FuzzDecodeBodies decodes: each request type
// of the route table, and the empty object the routes without one accept.
func fuzzedBodies() []reflect.Type {
	types := []reflect.Type{reflect.TypeFor[struct{}]()}
	for _, rt := range routeTable {
		if rt.request != nil && !slices.Contains(types, reflect.TypeOf(rt.request)) {
			types = append(types, reflect.TypeOf(rt.request))
		}
	}
	return types
}

// Every type a handler of the API decodes a body into (decodeBody(..., &v) with
// `var v T` in the same function) is fuzzed by FuzzDecodeBodies: a handler that
// decodes a type no route names as its request fails here.
func TestEveryDecodedBodyIsFuzzed(t *testing.T) {
	fuzzed := map[string]bool{}
	for _, typ := range fuzzedBodies() {
		name := typ.String() // "server.StartRequest", "trellis.ScheduleSpec", "struct {}"
		fuzzed[strings.TrimPrefix(name, "server.")] = true
	}
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	decoded := 0
	for _, file := range files {
		if strings.HasSuffix(file, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, file, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Body == nil {
				continue
			}
			for _, typ := range decodedBodyTypes(t, fset, fn) {
				decoded++
				if typ == "struct{}" {
					typ = "struct {}"
				}
				if !fuzzed[typ] {
					t.Errorf("%s decodes a body into %s, which no route of the table names as its request: FuzzDecodeBodies does not fuzz it",
						fn.Name.Name, typ)
				}
			}
		}
	}
	if decoded < len(fuzzed) {
		t.Errorf("found %d bodies decoded, fewer than the %d types fuzzed: is decodeBody still the decoder?", decoded, len(fuzzed))
	}
}

// decodedBodyTypes are the types fn decodes bodies into with decodeBody, as
// written in the `var` declaration of the variable whose address it passes.
func decodedBodyTypes(t *testing.T, fset *token.FileSet, fn *ast.FuncDecl) []string {
	vars := map[string]string{}
	var types []string
	ast.Inspect(fn.Body, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.ValueSpec:
			for _, name := range n.Names {
				if n.Type != nil {
					vars[name.Name] = gotypes.ExprString(n.Type)
				}
			}
		case *ast.CallExpr:
			if id, ok := n.Fun.(*ast.Ident); !ok || id.Name != "decodeBody" || len(n.Args) == 0 {
				return true
			}
			typ := ""
			if arg, ok := n.Args[len(n.Args)-1].(*ast.UnaryExpr); ok && arg.Op == token.AND {
				if id, ok := arg.X.(*ast.Ident); ok {
					typ = vars[id.Name]
				}
			}
			if typ == "" {
				t.Errorf("%s: decodeBody's value is not &v of a `var v T` before it: teach TestEveryDecodedBodyIsFuzzed",
					fset.Position(n.Pos()))
				return true
			}
			types = append(types, typ)
		}
		return true
	})
	return types
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
