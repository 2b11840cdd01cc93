package server

import (
	"encoding/json"
	"net/http"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/problem"
	"github.com/trellis-dev/trellis/store"
)

// The OpenAPI 3.1 document is generated from routeTable (paths, operations,
// parameters, roles) and from the Go types of the bodies (schemas), so it
// describes exactly what the server serves.

var (
	openapiOnce sync.Once
	openapiDoc  []byte
)

func (s *Server) openapi(w http.ResponseWriter, r *http.Request, _ *call) error {
	openapiOnce.Do(func() {
		openapiDoc, _ = json.MarshalIndent(buildOpenAPI(s.table), "", "  ")
	})
	w.Header().Set("Content-Type", "application/json")
	w.Write(openapiDoc)
	return nil
}

type obj = map[string]any

var pathParam = regexp.MustCompile(`\{([a-z]+)\}`)

// OpenAPI returns the server's OpenAPI 3.1 document.
func OpenAPI() map[string]any { return buildOpenAPI(routeTable) }

func buildOpenAPI(table []route) obj {
	problemSchema := schemaOf(reflect.TypeOf(Problem{}), nil)
	codes := problem.Codes()
	problemSchema["properties"].(obj)["code"] = obj{"type": "string", "enum": codes,
		"description": "the stable code of the error (docs/http-api.md, \"Errors\"); a newer server may add codes"}
	schemas := obj{"Problem": problemSchema}
	paths := obj{}
	for _, rt := range table {
		item, _ := paths[rt.pattern].(obj)
		if item == nil {
			item = obj{}
			paths[rt.pattern] = item
		}
		item[strings.ToLower(rt.method)] = operation(rt, schemas)
	}
	return obj{
		"openapi": "3.1.0",
		"info": obj{"title": "Trellis HTTP API", "version": "1",
			"description": "Start, inspect and steer durable workflow runs. See docs/http-api.md."},
		"servers": []any{
			obj{"url": "/", "description": "the server that serves this document"},
			obj{"url": "http://" + DefaultListen, "description": "a server on its default address (trellis server, trellis dev)"},
		},
		"paths": paths,
		"components": obj{
			"schemas":         schemas,
			"securitySchemes": obj{"bearer": obj{"type": "http", "scheme": "bearer"}},
		},
	}
}

func operation(rt route, schemas obj) obj {
	var params []any
	for _, m := range pathParam.FindAllStringSubmatch(rt.pattern, -1) {
		params = append(params, obj{"name": m[1], "in": "path", "required": true, "schema": obj{"type": "string"}})
	}
	for _, q := range rt.query {
		params = append(params, obj{"name": q.name, "in": "query", "description": q.doc, "schema": obj{"type": q.typ}})
	}
	if rt.stream {
		params = append(params, obj{"name": "Last-Event-ID", "in": "header",
			"description": "the id of the last event the client read: the stream goes on after it (an EventSource sends it when it reconnects); it wins over after",
			"schema":      obj{"type": "string"}})
	}
	if rt.takesKey() {
		params = append(params, obj{"name": IdempotencyKeyHeader, "in": "header",
			"description": "makes retries safe: a retry with the same key and request gets the first response again (docs/http-api.md)",
			"schema":      obj{"type": "string", "minLength": 1, "maxLength": 255}})
	}
	op := obj{"operationId": rt.op, "summary": rt.summary, "responses": responses(rt, schemas)}
	if len(params) > 0 {
		op["parameters"] = params
	}
	if rt.public {
		op["security"] = []any{}
	} else {
		op["security"] = []any{obj{"bearer": []any{}}}
		op["x-trellis-role"] = string(rt.role)
	}
	if rt.request != nil {
		op["requestBody"] = obj{"required": true, "content": obj{"application/json": obj{"schema": ref(rt.request, schemas)}}}
	}
	return op
}

func responses(rt route, schemas obj) obj {
	ok := obj{"description": http.StatusText(rt.status)}
	if rt.stream {
		ok["content"] = obj{"text/event-stream": obj{"schema": obj{"type": "string"}}}
	}
	switch {
	case rt.ndjson:
		ok["content"] = obj{"application/x-ndjson": obj{"schema": ref(rt.response, schemas)}}
	case rt.response != nil:
		ok["content"] = obj{"application/json": obj{"schema": ref(rt.response, schemas)}}
	case rt.op == "openapi":
		ok["content"] = obj{"application/json": obj{"schema": obj{"type": "object"}}}
	}
	out := obj{strconv.Itoa(rt.status): ok,
		"default": problemResponse("Another error: 500 internal (the server logs it), a status and code a newer server added", nil)}
	for status, codes := range errorCodes(rt) {
		out[strconv.Itoa(status)] = problemResponse(http.StatusText(status)+": "+strings.Join(codes, ", "), codes)
	}
	if rt.op == "getResult" {
		out["202"] = obj{"description": "The wait is over and the run has not ended", "content": ok["content"]}
	}
	return out
}

// problemResponse is an error answer: a Problem, with the codes it can have
// (x-trellis-codes; their sections in docs/http-api.md).
func problemResponse(description string, codes []string) obj {
	r := obj{"description": description,
		"content": obj{"application/problem+json": obj{"schema": obj{"$ref": "#/components/schemas/Problem"}}}}
	if codes != nil {
		r["x-trellis-codes"] = codes
	}
	return r
}

// ref adds the schema of v's type to schemas and returns a reference to it.
func ref(v any, schemas obj) obj {
	t := reflect.TypeOf(v)
	if _, ok := schemas[t.Name()]; !ok {
		schemas[t.Name()] = obj{} // placeholder against cycles
		schemas[t.Name()] = schemaOf(t, schemas)
	}
	return obj{"$ref": "#/components/schemas/" + t.Name()}
}

var (
	timeType    = reflect.TypeOf(time.Time{})
	payloadType = reflect.TypeOf(trellis.Payload(nil))
	rawType     = reflect.TypeOf(json.RawMessage(nil))
	// durationType reads and writes JSON as a string.
	durationType = reflect.TypeOf(store.Duration(0))
	durType      = reflect.TypeOf(time.Duration(0))
)

// enums are the string types of the API that take a fixed set of values.
var enums = map[reflect.Type]struct {
	values []string
	doc    string
}{
	reflect.TypeOf(trellis.Status("")): {statusValues(trellis.StatusPending, trellis.StatusRunning, trellis.StatusWaiting,
		trellis.StatusBlocked, trellis.StatusSucceeded, trellis.StatusFailed, trellis.StatusCancelled),
		"a run's state (docs/states.md)"},
	reflect.TypeOf(store.Status("")): {statusValues(store.StatusPending, store.StatusRunning, store.StatusWaiting,
		store.StatusBlocked, store.StatusSucceeded, store.StatusFailed, store.StatusCancelled),
		"a run's state (docs/states.md)"},
	reflect.TypeOf(trellis.ReusePolicy("")): {statusValues(trellis.ReuseRejectActive, trellis.ReuseReject, trellis.ReuseReturnExisting),
		`what a start does when its workflow ID is taken: "" (the default) refuses while a run with it is active, ` +
			`"reject" while any run has it, "return_existing" answers the latest run with it`},
	reflect.TypeOf(trellis.ApprovalStatus("")): {statusValues(trellis.ApprovalPending, trellis.ApprovalApproved,
		trellis.ApprovalRejected, trellis.ApprovalExpired), "an approval request's state"},
}

func statusValues[S ~string](vs ...S) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

// schemaOf describes type t as JSON Schema, following its JSON tags.
func schemaOf(t reflect.Type, schemas obj) obj {
	switch {
	case t == timeType:
		return obj{"type": "string", "format": "date-time"}
	case t == payloadType || t == rawType:
		return obj{"description": "any JSON value"}
	case t == durationType:
		return obj{"type": "string", "description": `a duration such as "720h" or "1m30s"`}
	case t == durType:
		return obj{"type": "string", "description": `a duration such as "90s" or "10m"`}
	}
	if e, ok := enums[t]; ok {
		return obj{"type": "string", "enum": e.values, "description": e.doc}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return schemaOf(t.Elem(), schemas)
	case reflect.String:
		return obj{"type": "string"}
	case reflect.Bool:
		return obj{"type": "boolean"}
	case reflect.Int, reflect.Int64, reflect.Int32:
		return obj{"type": "integer"}
	case reflect.Float64:
		return obj{"type": "number"}
	case reflect.Slice:
		return obj{"type": "array", "items": fieldSchema(t.Elem(), schemas)}
	case reflect.Map:
		return obj{"type": "object", "additionalProperties": fieldSchema(t.Elem(), schemas)}
	case reflect.Struct:
		return structSchema(t, schemas)
	}
	return obj{}
}

func structSchema(t reflect.Type, schemas obj) obj {
	props := obj{}
	var required []string
	for i := range t.NumField() {
		f := t.Field(i)
		name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" || !f.IsExported() {
			continue
		}
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			// An embedded struct's fields are the outer struct's in JSON.
			inner := structSchema(f.Type, schemas)
			for k, v := range inner["properties"].(obj) {
				props[k] = v
			}
			if req, ok := inner["required"].([]string); ok {
				required = append(required, req...)
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		props[name] = fieldSchema(f.Type, schemas)
		if !strings.Contains(opts, "omitempty") && f.Type.Kind() != reflect.Pointer {
			required = append(required, name)
		}
	}
	s := obj{"type": "object", "properties": props}
	if len(required) > 0 {
		s["required"] = required
	}
	return s
}

// fieldSchema describes a field's type: named structs (and pointers to them) by
// reference, so each record has one schema.
func fieldSchema(t reflect.Type, schemas obj) obj {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Struct && t != timeType && t.Name() != "" && schemas != nil {
		return ref(reflect.New(t).Elem().Interface(), schemas)
	}
	return schemaOf(t, schemas)
}
