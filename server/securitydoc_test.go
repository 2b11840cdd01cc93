package server

import (
	"os"
	"regexp"
	"strings"
	"testing"

	pb "github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1"
	"github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1/workerv1connect"
)

// docRule is the rule of a route or worker procedure as docs/security.md's
// table states it: the role cell and the "checked on" cell.
type docRule struct {
	role, checkedOn string
}

// scopeDocs is how the table's "checked on" cell begins for each scope: a row
// may say more after it, not something else.
var scopeDocs = map[scope]string{
	scopeNone:      "",
	scopeGlobal:    "every namespace",
	scopeNamespace: "`{ns}` as a whole",
	scopeListQueue: "`{ns}`, and the `queue` filter when given",
	scopeBodyQueue: "`{ns}` and the queue each run of the body goes to",
	scopeRun:       "`{ns}` and the run's queue",
	scopeRunLazy:   "`{ns}` and the run's queue",
	scopeApproval:  "`{ns}` and the queue of the approval's run",
	scopeRunsQuery: "`{ns}` and the queue of each run of `runs`",
}

var workerScopeDocs = map[workerScope]string{
	workerQueues:    "`namespace` and each queue of `queues`",
	workerLeases:    "the queue of every lease",
	workerRun:       "`namespace` and the run's queue",
	workerTopic:     "`namespace`; a run's or its stream's topic: the run's queue",
	workerNamespace: "`namespace` (a grant restricted to a queue does)",
}

// The endpoint × role table of docs/security.md is the server's: every route
// of the API and of the web UI, and every worker procedure, is in it once, with
// the role and the scope of its rule, and nothing else is.
func TestSecurityDocTable(t *testing.T) {
	doc := readSecurityTable(t, "../docs/security.md")
	check := func(key, role, checkedOn string) {
		t.Helper()
		got, ok := doc[key]
		switch {
		case !ok:
			t.Errorf("docs/security.md: %s is missing from the table of endpoints and roles (role %s, checked on %q)", key, role, checkedOn)
		case got.role != role:
			t.Errorf("docs/security.md: %s needs role %q, the table says %q", key, role, got.role)
		case !strings.HasPrefix(got.checkedOn, checkedOn) || (checkedOn == "") != (got.checkedOn == ""):
			t.Errorf("docs/security.md: %s is checked on %q, the table says %q", key, checkedOn, got.checkedOn)
		}
		delete(doc, key)
	}
	for _, rt := range routeTable {
		check(rt.method+" "+rt.pattern, docRole(rt.public, string(rt.role), ""), scopeDocs[rt.scope])
	}
	for _, rt := range uiRouteTable {
		check("web UI: "+rt.method+" "+rt.pattern, docRole(rt.public, string(rt.role), string(rt.orRole)), scopeDocs[rt.scope])
	}
	methods := pb.File_trellis_worker_v1_worker_proto.Services().ByName("WorkerService").Methods()
	for i := range methods.Len() {
		name := string(methods.Get(i).Name())
		sc, ok := workerRules["/"+workerv1connect.WorkerServiceName+"/"+name]
		if !ok {
			t.Errorf("worker procedure %s has no rule in workerRules", name)
		}
		check("worker protocol: "+name, "worker", workerScopeDocs[sc])
	}
	for key := range doc {
		t.Errorf("docs/security.md: the table lists %s, which the server does not have", key)
	}
}

func docRole(public bool, role, orRole string) string {
	switch {
	case public:
		return "none (public)"
	case orRole != "":
		return role + " or " + orRole
	}
	return role
}

// readSecurityTable reads the table of section "Endpoints and roles": each
// backquoted endpoint of a row's first cell (`METHOD /path`, after "web UI: "
// for the UI's, or a procedure after "worker protocol: ") with its row's role
// and "checked on" cells.
func readSecurityTable(t *testing.T, path string) map[string]docRule {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Endpoints and roles\n")
	if !ok {
		t.Fatalf("%s: no section Endpoints and roles", path)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	rules := map[string]docRule{}
	rows := 0
	item := regexp.MustCompile("`([^`]+)`")
	for line := range strings.SplitSeq(section, "\n") {
		if !strings.HasPrefix(line, "| ") || strings.HasPrefix(line, "| endpoint ") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), " | ")
		if len(cells) != 3 {
			t.Fatalf("%s: row %q has %d cells, want 3", path, line, len(cells))
		}
		rows++
		endpoints, role, checkedOn := strings.TrimSpace(cells[0]), strings.TrimSpace(cells[1]), strings.TrimSpace(cells[2])
		prefix := ""
		for _, p := range []string{"web UI: ", "worker protocol: "} {
			if rest, ok := strings.CutPrefix(endpoints, p); ok {
				prefix, endpoints = p, rest
			}
		}
		for _, m := range item.FindAllStringSubmatch(endpoints, -1) {
			key := prefix + m[1]
			if _, dup := rules[key]; dup {
				t.Errorf("%s: %s is in the table twice", path, key)
			}
			rules[key] = docRule{role: role, checkedOn: checkedOn}
		}
	}
	if rows == 0 {
		t.Fatalf("%s: no table in section Endpoints and roles", path)
	}
	return rules
}
