package server

import (
	"encoding/json"
	"errors"
	"os"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/trellis-dev/trellis/internal/problem"
)

// Every record of the API has its own schema in the document.
func TestOpenAPISchemas(t *testing.T) {
	doc := OpenAPI()
	schemas := doc["components"].(map[string]any)["schemas"].(map[string]any)
	var names []string
	for n := range schemas {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, want := range []string{"Run", "RunPage", "HistoryOp", "Attempt", "ErrorInfo", "ApprovalRecord", "ApprovalList",
		"WorkerRecord", "StartRequest", "EventRequest", "DecideRequest", "ResetRequest", "Problem", "RecordedHistory", "Value"} {
		if schemas[want] == nil {
			t.Errorf("no schema %s (have %v)", want, names)
		}
	}
	if _, err := json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
}

// The document's details a client needs: 4xx answers per operation that name
// their codes, a servers entry, enums, Last-Event-ID on the stream, and the
// tables of error codes in openapi_errors.go hold only codes of the table.
func TestOpenAPIDetails(t *testing.T) {
	doc := OpenAPI()
	if s, _ := doc["servers"].([]any); len(s) == 0 {
		t.Error("no servers")
	}
	schemas := doc["components"].(obj)["schemas"].(obj)
	prop := func(schema, field string) obj {
		return schemas[schema].(obj)["properties"].(obj)[field].(obj)
	}
	for _, c := range []struct {
		schema, field string
		want          []string
	}{
		{"Run", "status", []string{"pending", "running", "waiting", "blocked", "succeeded", "failed", "cancelled"}},
		{"StartRequest", "reuse", []string{"", "reject", "return_existing"}},
		{"ApprovalRecord", "status", []string{"pending", "approved", "rejected", "expired"}},
		{"Problem", "code", problem.Codes()},
	} {
		if got, _ := prop(c.schema, c.field)["enum"].([]string); !slices.Equal(got, c.want) {
			t.Errorf("%s.%s: enum %v, want %v", c.schema, c.field, got, c.want)
		}
	}
	for _, rt := range routeTable {
		op := doc["paths"].(obj)[rt.pattern].(obj)[strings.ToLower(rt.method)].(obj)
		four := 0
		for status, r := range op["responses"].(obj) {
			if !strings.HasPrefix(status, "4") {
				continue
			}
			four++
			codes, _ := r.(obj)["x-trellis-codes"].([]string)
			for _, c := range codes {
				if e, ok := problem.Of(c); !ok || strconv.Itoa(e.Status) != status {
					t.Errorf("%s: %s answer names code %q (%d)", rt.op, status, c, e.Status)
				}
			}
			if len(codes) == 0 {
				t.Errorf("%s: %s answer names no code", rt.op, status)
			}
		}
		if four == 0 {
			t.Errorf("%s: no 4xx answer", rt.op)
		}
		hasLastEventID := false
		params, _ := op["parameters"].([]any)
		for _, p := range params {
			hasLastEventID = hasLastEventID || p.(obj)["name"] == "Last-Event-ID" && p.(obj)["in"] == "header"
		}
		if hasLastEventID != rt.stream {
			t.Errorf("%s: Last-Event-ID header declared %v, a stream %v", rt.op, hasLastEventID, rt.stream)
		}
	}
	ops := map[string]bool{}
	for _, rt := range routeTable {
		ops[rt.op] = true
	}
	for op, codes := range opCodes {
		if !ops[op] {
			t.Errorf("opCodes names operation %q, which no route has", op)
		}
		for _, c := range codes {
			if _, ok := problem.Of(c); !ok {
				t.Errorf("opCodes[%s] names code %q, which internal/problem has not", op, c)
			}
		}
	}
	for seg, c := range paramCodes {
		if _, ok := problem.Of(c); !ok {
			t.Errorf("paramCodes[%s] names code %q, which internal/problem has not", seg, c)
		}
	}
}

// Every problem type resolves: docs/http-api.md has a heading whose anchor is
// the code (as GitHub makes anchors), and its table of codes is the table of
// internal/problem, statuses included, both ways.
func TestProblemTypesResolve(t *testing.T) {
	const path = "../docs/http-api.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	anchors := map[string]string{} // anchor -> the text under its heading
	heading := regexp.MustCompile("(?m)^#{1,6} (.+)$")
	locs := heading.FindAllStringSubmatchIndex(doc, -1)
	for i, l := range locs {
		end := len(doc)
		if i+1 < len(locs) {
			end = locs[i+1][0]
		}
		anchors[githubAnchor(doc[l[2]:l[3]])] = doc[l[1]:end]
	}
	_, section, _ := strings.Cut(doc, "\n## Errors\n")
	rows := map[string]string{}
	for _, m := range regexp.MustCompile("(?m)^\\| (\\d{3}) \\| \\[`([a-z_]+)`\\]\\(#([a-z_]+)\\) \\|").FindAllStringSubmatch(section, -1) {
		if m[2] != m[3] {
			t.Errorf("%s: the row of %s links #%s", path, m[2], m[3])
		}
		rows[m[2]] = m[1]
	}
	for _, code := range problem.Codes() {
		status := "500"
		if e, ok := problem.Of(code); ok {
			status = strconv.Itoa(e.Status)
		}
		p, _ := problemFor(errors.New("x")) // the internal problem
		if e, ok := problem.Of(code); ok {
			p, _ = problemFor(e.Err)
		}
		anchor := strings.TrimPrefix(p.Type, "https://github.com/trellis-dev/trellis/blob/main/docs/http-api.md#")
		text, ok := anchors[anchor]
		switch {
		case anchor != code:
			t.Errorf("code %s: type %s", code, p.Type)
		case !ok:
			t.Errorf("%s: no heading with anchor #%s (the type of code %s)", path, anchor, code)
		case !strings.HasPrefix(strings.TrimSpace(text), "HTTP "+status+". "):
			t.Errorf("%s: the section of %s does not begin with its status %s", path, code, status)
		}
		if rows[code] != status {
			t.Errorf("%s: the table of codes has %s as %q, want %s", path, code, rows[code], status)
		}
		delete(rows, code)
	}
	for code := range rows {
		t.Errorf("%s: the table of codes has %s, which the server does not answer", path, code)
	}
}

// githubAnchor is the anchor GitHub gives a heading: lower case, spaces to
// hyphens, punctuation but hyphens and underscores dropped.
func githubAnchor(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(h)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}
