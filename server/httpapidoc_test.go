package server

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// The Routes table of docs/http-api.md is the server's: every route of
// routeTable is in it once, in a row of its own, with the role its rule needs
// ("none" for a public route; "of every namespace" for a route whose role must
// be granted on "*") and its success status; nothing else is.
func TestHTTPAPIDocTable(t *testing.T) {
	const path = "../docs/http-api.md"
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Routes\n")
	if !ok {
		t.Fatalf("%s: no section Routes", path)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	type row struct{ role, success string }
	doc := map[string]row{}
	for line := range strings.SplitSeq(section, "\n") {
		if !strings.HasPrefix(line, "| `") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) != 5 {
			t.Fatalf("%s: row %q has %d cells, want 5", path, line, len(cells))
		}
		key := strings.Trim(strings.TrimSpace(cells[0]), "`")
		if strings.Contains(key, "`") {
			t.Errorf("%s: row %q names more than one route", path, line)
		}
		if _, dup := doc[key]; dup {
			t.Errorf("%s: %s is in the table twice", path, key)
		}
		doc[key] = row{role: strings.TrimSpace(cells[1]), success: strings.TrimSpace(cells[2])}
	}
	if len(doc) == 0 {
		t.Fatalf("%s: no table in section Routes", path)
	}
	for _, rt := range routeTable {
		key := rt.method + " " + rt.pattern
		got, ok := doc[key]
		delete(doc, key)
		want := string(rt.role)
		if rt.public {
			want = "none"
		}
		switch {
		case !ok:
			t.Errorf("%s: %s is missing from the Routes table (role %s, status %d)", path, key, want, rt.status)
		case got.role != want && !strings.HasPrefix(got.role, want+" "):
			t.Errorf("%s: %s needs role %s, the table says %q", path, key, want, got.role)
		case (rt.scope == scopeGlobal) != strings.Contains(got.role, "of every namespace"):
			t.Errorf("%s: %s: the role cell %q must say \"of every namespace\" exactly when the role must be granted on *", path, key, got.role)
		case !strings.Contains(got.success, strconv.Itoa(rt.status)):
			t.Errorf("%s: %s answers %d on success, the table says %q", path, key, rt.status, got.success)
		}
	}
	for key := range doc {
		t.Errorf("%s: the Routes table lists %s, which the server does not have", path, key)
	}
}
