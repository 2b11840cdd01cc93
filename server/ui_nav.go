package server

import (
	"context"
	"fmt"
	"net/url"
	"slices"
	"strings"

	"github.com/trellis-dev/trellis/internal/auth"
)

// What the UI shows and offers follows the principal's roles: a link to a page
// appears only for a principal that may open it, judged by that page's own
// rule in uiRouteTable (mayOpen), the rule prepareUI enforces, never by a
// second list of roles. The server enforces the rules anyway.

// uiNavPages are the pages of the navigation, in order: its key (the page's name in render),
// its label and the GET route of uiRouteTable that serves it. "/" sends a
// principal to the first of them it may open.
var uiNavPages = []struct{ key, label, pattern string }{
	{"runs", "Runs", uiNS + "/runs"},
	{"approvals", "Approvals", uiNS + "/approvals"},
	{"queues", "Queues", uiNS + "/queues"},
	{"schedules", "Schedules", uiNS + "/schedules"},
	{"workers", "Workers", uiNS + "/workers"},
	{"audit", "Audit", uiNS + "/audit"},
}

// navItem is a link of the navigation.
type navItem struct {
	Key, Label, Href string
	On               bool
}

// uiRoutes indexes uiRouteTable by "METHOD pattern". It is filled by init:
// the table's handlers use it, so a variable's initializer would be a cycle.
var uiRoutes map[string]*uiRoute

func init() {
	uiRoutes = make(map[string]*uiRoute, len(uiRouteTable))
	for i := range uiRouteTable {
		uiRoutes[uiRouteTable[i].method+" "+uiRouteTable[i].pattern] = &uiRouteTable[i]
	}
}

// uiRouteFor finds the UI route of method and pattern (nil: none).
func uiRouteFor(method, pattern string) *uiRoute { return uiRoutes[method+" "+pattern] }

// roleFor is the role the route's rule checks for p in ns: its role, or its
// orRole for a principal that holds only that one there.
func (rt *uiRoute) roleFor(p *auth.Principal, ns string) auth.Role {
	if rt.orRole != "" && !hasRoleIn(p, rt.role, ns) && hasRoleIn(p, rt.orRole, ns) {
		return rt.orRole
	}
	return rt.role
}

// mayOpen reports whether p may open the page that GET route pattern of
// uiRouteTable serves in namespace ns, about queue q: the run's queue for a
// run's page, the `queue` filter of a list ("" for none). It is the route's
// rule as prepareUI and authorizeScope check it. A route whose rule needs a
// record other than a run (an approval) is never a link's target: false.
func mayOpen(p *auth.Principal, ns, pattern, q string) bool {
	rt := uiRouteFor("GET", pattern)
	switch {
	case rt == nil || p == nil:
		return false
	case rt.public:
		return true
	}
	role := rt.roleFor(p, ns)
	if ns == auth.SystemNamespace || !namespacePattern.MatchString(ns) || !hasRoleIn(p, role, ns) {
		return false
	}
	switch rt.scope {
	case scopeNamespace:
		q = ""
	case scopeListQueue, scopeRun:
	default:
		return false
	}
	c := call{principal: p, role: role, ns: ns}
	return c.allowQueue(q) == nil
}

// navHref is the link to nav page pattern in ns for p, or "" when p may open
// it neither as a whole nor filtered on a queue of one of p's grants (a
// principal whose grants name queues sees its first queue's runs).
func navHref(p *auth.Principal, ns, pattern string) string {
	path := "/ui/" + url.PathEscape(ns) + pattern[len(uiNS):]
	if mayOpen(p, ns, pattern, "") {
		return path
	}
	if rt := uiRouteFor("GET", pattern); rt == nil || rt.scope != scopeListQueue {
		return ""
	}
	for _, g := range p.Grants {
		if g.Queue != "" && (g.Namespace == ns || g.Namespace == auth.AllNamespaces) && mayOpen(p, ns, pattern, g.Queue) {
			return path + "?queue=" + url.QueryEscape(g.Queue)
		}
	}
	return ""
}

// navItems is the navigation of a page of ns for p, with page current on.
func navItems(p *auth.Principal, ns, current string) []navItem {
	switch current {
	case "run", "search":
		current = "runs"
	case "approval":
		current = "approvals"
	}
	var items []navItem
	for _, pg := range uiNavPages {
		if href := navHref(p, ns, pg.pattern); href != "" {
			items = append(items, navItem{Key: pg.key, Label: pg.label, Href: href, On: pg.key == current})
		}
	}
	for _, pg := range uiGlobalPages {
		if rt := uiRouteFor("GET", pg.pattern); rt != nil && allowGlobal(p, rt.role) == nil {
			items = append(items, navItem{Key: pg.key, Label: pg.label, Href: pg.pattern, On: pg.key == current})
		}
	}
	return items
}

// uiHomePath is where "/" and a sign-in without a target send p: the first
// nav page it may open, in the first namespace its grants name where it may
// open one, else in "default" (for a grant of every namespace). "" when it may
// open none.
func uiHomePath(p *auth.Principal) string {
	var spaces []string
	for _, g := range p.Grants {
		if g.Namespace != auth.AllNamespaces && g.Namespace != auth.SystemNamespace {
			spaces = append(spaces, g.Namespace)
		}
	}
	spaces = append(spaces, "default")
	for _, ns := range spaces {
		for _, pg := range uiNavPages {
			if href := navHref(p, ns, pg.pattern); href != "" {
				return href
			}
		}
	}
	return ""
}

// errNoUIPage is the refusal of "/" to a principal that may open no page.
func errNoUIPage(p *auth.Principal) error {
	return fmt.Errorf("%w: principal %q may open no page of the web UI: its pages need the reader role (or approver, for the approvals)",
		ErrPermissionDenied, p.Name)
}

// runHref is the link to run id of queue q in the call's namespace, or ""
// when the principal may not open it (the page shows the ID as text).
func (c *uiCall) runHref(id, q string) string {
	if !mayOpen(c.principal, c.ns, uiNS+"/runs/{id}", q) {
		return ""
	}
	return runPath(c.ns, id)
}

// uiGlobalPages are the navigation's pages of no namespace, linked for a
// principal that their route's rule (scopeGlobal) allows.
var uiGlobalPages = []struct{ key, label, pattern string }{
	{"tokens", "Tokens", "/ui/tokens"},
	{"audit-all", "Audit (all)", "/ui/audit"},
}

// uiMaxSpaces caps the namespace switcher (a store may hold many namespaces).
const uiMaxSpaces = 200

// namespaceSwitch is the namespace switcher of a page of ns: each namespace in
// which p may open a page, linked to the same page there when p may open it,
// else to its first page there. They are the namespaces its grants name, and
// for a grant of every namespace those with a record and "default" too. A
// switcher of one namespace is none (nil).
func (s *Server) namespaceSwitch(ctx context.Context, p *auth.Principal, ns, page string) []navItem {
	var spaces []string
	every := false
	for _, g := range p.Grants {
		switch g.Namespace {
		case auth.AllNamespaces:
			every = true
		case auth.SystemNamespace:
		default:
			spaces = append(spaces, g.Namespace)
		}
	}
	if every {
		spaces = append(spaces, "default", ns)
		if list, err := s.store.NamespaceList(ctx); err == nil { // without it, the switcher shows what the grants name
			for _, n := range list {
				spaces = append(spaces, n.Name)
			}
		}
	}
	slices.Sort(spaces)
	spaces = slices.Compact(spaces)
	pattern := ""
	for _, pg := range uiNavPages {
		if pg.key == page || page == "run" && pg.key == "runs" || page == "approval" && pg.key == "approvals" {
			pattern = pg.pattern
		}
	}
	var items []navItem
	for _, space := range spaces {
		if len(items) == uiMaxSpaces {
			break
		}
		href := ""
		if pattern != "" {
			href = navHref(p, space, pattern)
		}
		for _, pg := range uiNavPages {
			if href != "" {
				break
			}
			href = navHref(p, space, pg.pattern)
		}
		if href != "" {
			items = append(items, navItem{Key: space, Label: space, Href: href, On: space == ns})
		}
	}
	if len(items) < 2 {
		return nil
	}
	return items
}

// searchBox is the navigation's search by run ID or workflow ID: shown to a
// principal that may open the runs of the namespace (or of a queue of its
// grants, which the search keeps to).
type searchBox struct {
	Action, Queue, Value string
}

// searchFor is the search box of a page of ns for p, nil when p may open no
// runs there.
func searchFor(p *auth.Principal, ns, value string) *searchBox {
	href := navHref(p, ns, uiNS+"/runs")
	if href == "" {
		return nil
	}
	b := &searchBox{Action: "/ui/" + url.PathEscape(ns) + "/search", Value: value}
	if _, q, ok := strings.Cut(href, "?queue="); ok {
		b.Queue, _ = url.QueryUnescape(q)
	}
	return b
}
