package storetest

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

var auditCases = []testCase{
	{"AppendAndList", auditAppendAndList},
	{"ListFilters", auditListFilters},
	{"ListPages", auditListPages},
	{"ListBadInput", auditListBadInput},
	{"AppendBadInputWritesNothing", auditAppendBadInput},
	{"PurgeExpired", auditPurgeExpired},
	{"PurgeBadInput", auditPurgeBadInput},
	{"Namespaces", auditNamespaces},
}

// auditEntry is an entry of namespace nsName at time at, by principal, of
// action; the rest of its fields are filled and distinct.
func (e *env) auditEntry(nsName, principal, action string, at time.Time) store.AuditEntry {
	id := e.newID("obj")
	return store.AuditEntry{Time: at, Principal: principal, Action: action,
		Target:  store.AuditTarget{Namespace: nsName, Type: strings.Split(action, ".")[0], ID: id},
		Outcome: "ok", RequestID: "req-" + id, Source: "192.0.2.7", Via: "api", Detail: "detail of " + id}
}

// appendAudit appends entries and fails on error.
func (e *env) appendAudit(entries ...store.AuditEntry) {
	e.t.Helper()
	if err := e.st.AuditAppend(e.ctx, &store.AuditAppendParams{Entries: entries}); err != nil {
		e.t.Fatalf("AuditAppend: %v", err)
	}
}

// auditList lists every entry p filters, page after page (of pageSize), and
// checks that no entry appears twice.
func (e *env) auditList(p store.AuditListParams, pageSize int) []*store.AuditEntry {
	e.t.Helper()
	var all []*store.AuditEntry
	p.Limit = pageSize
	for range 1000 {
		res, err := e.st.AuditList(e.ctx, &p)
		if err != nil {
			e.t.Fatalf("AuditList(%+v): %v", p, err)
		}
		if pageSize > 0 && len(res.Entries) > pageSize {
			e.t.Fatalf("AuditList: page of %d entries, limit %d", len(res.Entries), pageSize)
		}
		all = append(all, res.Entries...)
		if res.NextCursor == "" {
			return all
		}
		p.Cursor = res.NextCursor
	}
	e.t.Fatal("AuditList: more than 1000 pages")
	return nil
}

// auditIDs are the target IDs of entries, in order.
func auditIDs(entries []*store.AuditEntry) []string {
	ids := make([]string, len(entries))
	for i, en := range entries {
		ids[i] = en.Target.ID
	}
	return ids
}

func auditAppendAndList(t *testing.T, e *env) {
	t0 := e.clk.Now()
	a := e.auditEntry(ns, "alice", "run.cancel", t0)
	b := e.auditEntry("", "root", "token.create", t0.Add(time.Second))
	b.Outcome, b.Detail = "permission_denied", ""
	c := e.auditEntry("other", "bob", "queue.pause", t0.Add(-time.Minute)) // appended last, older time
	c.Via = "ui"
	e.appendAudit(a, b)
	e.appendAudit(c)
	got := e.auditList(store.AuditListParams{}, 0)
	want := []store.AuditEntry{c, b, a} // newest first: in the order appended, not by Time
	if len(got) != len(want) {
		t.Fatalf("AuditList = %d entries, want %d", len(got), len(want))
	}
	for i, w := range want {
		g := *got[i]
		if d := g.Time.Sub(w.Time).Abs(); d > timeTolerance {
			t.Errorf("entry %d: Time %v, want %v", i, g.Time, w.Time)
		}
		g.Time = w.Time
		if g != w {
			t.Errorf("entry %d = %+v, want %+v", i, g, w)
		}
	}
}

func auditListFilters(t *testing.T, e *env) {
	t0 := e.clk.Now()
	entries := []store.AuditEntry{
		e.auditEntry(ns, "alice", "run.cancel", t0),
		e.auditEntry(ns, "bob", "run.start", t0.Add(time.Minute)),
		e.auditEntry("other", "alice", "run.cancel", t0.Add(2*time.Minute)),
		e.auditEntry("", "root", "token.create", t0.Add(3*time.Minute)),
		e.auditEntry("", "root", "token.revoke", t0.Add(4*time.Minute)),
		e.auditEntry(ns, "alice", "tokenish.x", t0.Add(5*time.Minute)), // not a token.* action
	}
	e.appendAudit(entries...)
	id := func(i ...int) []string {
		var out []string
		for _, k := range i {
			out = append(out, entries[k].Target.ID)
		}
		return out
	}
	for _, c := range []struct {
		p    store.AuditListParams
		want []string // newest first
	}{
		{store.AuditListParams{Namespace: ns}, id(5, 1, 0)},
		{store.AuditListParams{Namespace: "other"}, id(2)},
		{store.AuditListParams{Namespace: "none"}, nil},
		{store.AuditListParams{Principal: "alice"}, id(5, 2, 0)},
		{store.AuditListParams{Action: "run.cancel"}, id(2, 0)},
		{store.AuditListParams{Action: "token.*"}, id(4, 3)},
		{store.AuditListParams{Action: "run.*", Namespace: ns}, id(1, 0)},
		{store.AuditListParams{Since: t0.Add(time.Minute), Until: t0.Add(3 * time.Minute)}, id(2, 1)},
		{store.AuditListParams{Since: t0.Add(4 * time.Minute)}, id(5, 4)},
		{store.AuditListParams{Until: t0.Add(time.Minute)}, id(0)},
		{store.AuditListParams{Principal: "alice", Namespace: ns, Action: "run.cancel"}, id(0)},
	} {
		if got := auditIDs(e.auditList(c.p, 2)); !slices.Equal(got, c.want) {
			t.Errorf("AuditList(%+v) = %v, want %v", c.p, got, c.want)
		}
	}
}

func auditListPages(t *testing.T, e *env) {
	var want []string
	var batch []store.AuditEntry
	for i := range 25 {
		en := e.auditEntry(ns, fmt.Sprintf("p%d", i%3), "run.start", e.clk.Now())
		batch = append(batch, en)
		want = append(want, en.Target.ID)
	}
	e.appendAudit(batch[:10]...)
	e.appendAudit(batch[10:]...)
	slices.Reverse(want)
	for _, size := range []int{1, 7, 25, 100} {
		if got := auditIDs(e.auditList(store.AuditListParams{Namespace: ns}, size)); !slices.Equal(got, want) {
			t.Errorf("pages of %d: %v, want %v", size, got, want)
		}
	}
	// A page's cursor stays valid when entries are appended after it: the
	// next page goes on below it and never repeats an entry.
	res, err := e.st.AuditList(e.ctx, &store.AuditListParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	e.appendAudit(e.auditEntry(ns, "late", "run.start", e.clk.Now()))
	rest := e.auditList(store.AuditListParams{Cursor: res.NextCursor}, 10)
	if got := append(auditIDs(res.Entries), auditIDs(rest)...); !slices.Equal(got, want) {
		t.Errorf("pages around an append: %v, want %v", got, want)
	}
}

func auditListBadInput(t *testing.T, e *env) {
	t0 := e.clk.Now()
	for _, p := range []store.AuditListParams{
		{Limit: -1},
		{Cursor: "x"},
		{Cursor: "-3"},
		{Since: t0, Until: t0},
		{Since: t0.Add(time.Second), Until: t0},
		{Action: ".*"},
		{Action: "a*.*"},
		{Action: "*"},
		{Action: "run*"},
		{Principal: "a\x00b"},
		{Namespace: "\xff"},
	} {
		if _, err := e.st.AuditList(e.ctx, &p); !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("AuditList(%+v) = %v, want ErrInvalidParams", p, err)
		}
	}
}

func auditAppendBadInput(t *testing.T, e *env) {
	good := func() store.AuditEntry { return e.auditEntry(ns, "alice", "run.cancel", e.clk.Now()) }
	bad := []func(*store.AuditEntry){
		func(en *store.AuditEntry) { en.Time = time.Time{} },
		func(en *store.AuditEntry) { en.Principal = "" },
		func(en *store.AuditEntry) { en.Action = "" },
		func(en *store.AuditEntry) { en.Target.Type = "" },
		func(en *store.AuditEntry) { en.Outcome = "" },
		func(en *store.AuditEntry) { en.Target.ID = "a\x00b" },
		func(en *store.AuditEntry) { en.Detail = "\xff\xfe" },
		func(en *store.AuditEntry) { en.Source = strings.Repeat("s", store.MaxAuditField+1) },
	}
	for i, mod := range bad {
		last := good()
		mod(&last)
		// The bad entry comes last: the good ones before it are not written
		// either.
		err := e.st.AuditAppend(e.ctx, &store.AuditAppendParams{Entries: []store.AuditEntry{good(), good(), last}})
		if !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("AuditAppend with bad entry %d = %v, want ErrInvalidParams", i, err)
		}
	}
	if err := e.st.AuditAppend(e.ctx, &store.AuditAppendParams{}); !errors.Is(err, store.ErrInvalidParams) {
		t.Errorf("AuditAppend of no entry = %v, want ErrInvalidParams", err)
	}
	many := make([]store.AuditEntry, store.MaxAuditBatch+1)
	for i := range many {
		many[i] = good()
	}
	if err := e.st.AuditAppend(e.ctx, &store.AuditAppendParams{Entries: many}); !errors.Is(err, store.ErrInvalidParams) {
		t.Errorf("AuditAppend of %d entries = %v, want ErrInvalidParams", len(many), err)
	}
	if got := e.auditList(store.AuditListParams{}, 0); len(got) != 0 {
		t.Fatalf("refused appends wrote %d entries", len(got))
	}
	e.appendAudit(many[:store.MaxAuditBatch]...)
	if got := e.auditList(store.AuditListParams{}, store.MaxListLimit); len(got) != store.MaxAuditBatch {
		t.Fatalf("a full batch wrote %d entries, want %d", len(got), store.MaxAuditBatch)
	}
}

func auditPurgeExpired(t *testing.T, e *env) {
	t0 := e.clk.Now()
	var old, keep []store.AuditEntry
	for i := range 5 {
		old = append(old, e.auditEntry(ns, "alice", "run.cancel", t0.Add(time.Duration(i)*time.Second)))
	}
	keep = append(keep,
		e.auditEntry(ns, "alice", "run.cancel", t0.Add(time.Hour)),           // at the cutoff: kept
		e.auditEntry("other", "bob", "run.start", t0),                        // another namespace
		e.auditEntry("", "root", "token.create", t0.Add(-24*time.Hour)),      // no namespace
		e.auditEntry(ns, "carol", "queue.pause", t0.Add(2*time.Hour)),        // fresh
		e.auditEntry("other", "bob", "run.start", t0.Add(-48*time.Hour)),     // another namespace, older
		e.auditEntry("", "root", "namespace.create", t0.Add(30*time.Minute)), // no namespace, fresh
	)
	// Appended out of time order: the purge goes by Time, not by order.
	e.appendAudit(keep[0], old[3], keep[1], old[0], keep[2], old[4], keep[3], old[1], keep[4], old[2], keep[5])
	cutoff := t0.Add(time.Hour)
	for _, want := range []int{3, 2, 0} {
		n, err := e.st.AuditPurge(e.ctx, &store.AuditPurgeParams{Namespace: ns, Before: cutoff, Limit: 3})
		if err != nil || n != want {
			t.Fatalf("AuditPurge = %d, %v; want %d", n, err, want)
		}
	}
	// The entries of no namespace are purged apart.
	n, err := e.st.AuditPurge(e.ctx, &store.AuditPurgeParams{Before: t0})
	if err != nil || n != 1 {
		t.Fatalf("AuditPurge of no namespace = %d, %v; want 1", n, err)
	}
	var wantIDs []string
	for _, en := range keep {
		if en.Action != "token.create" {
			wantIDs = append(wantIDs, en.Target.ID)
		}
	}
	got := auditIDs(e.auditList(store.AuditListParams{}, 0))
	slices.Sort(got)
	slices.Sort(wantIDs)
	if !slices.Equal(got, wantIDs) {
		t.Fatalf("entries left %v, want %v", got, wantIDs)
	}
}

func auditPurgeBadInput(t *testing.T, e *env) {
	e.appendAudit(e.auditEntry(ns, "alice", "run.cancel", e.clk.Now()))
	later := e.clk.Now().Add(time.Hour)
	for _, p := range []store.AuditPurgeParams{
		{Namespace: ns},
		{Namespace: ns, Before: later, Limit: -1},
		{Namespace: ns, Before: later, Limit: store.MaxPurgeBatch + 1},
	} {
		if _, err := e.st.AuditPurge(e.ctx, &p); !errors.Is(err, store.ErrInvalidParams) {
			t.Fatalf("AuditPurge(%+v) = %v, want ErrInvalidParams", p, err)
		}
	}
	if got := e.auditList(store.AuditListParams{}, 0); len(got) != 1 {
		t.Fatalf("refused purges left %d entries, want 1", len(got))
	}
}

func auditNamespaces(t *testing.T, e *env) {
	got, err := e.st.AuditNamespaces(e.ctx)
	if err != nil || len(got) != 0 {
		t.Fatalf("AuditNamespaces of an empty log = %v, %v", got, err)
	}
	now := e.clk.Now()
	e.appendAudit(e.auditEntry("zeta", "a", "run.start", now), e.auditEntry(ns, "a", "run.start", now),
		e.auditEntry("zeta", "a", "run.start", now), e.auditEntry("alpha", "a", "run.start", now))
	if got, err = e.st.AuditNamespaces(e.ctx); err != nil || !slices.Equal(got, []string{"alpha", ns, "zeta"}) {
		t.Fatalf("AuditNamespaces = %v, %v; want [alpha %s zeta]", got, err, ns)
	}
	e.appendAudit(e.auditEntry("", "root", "token.create", now))
	if got, err = e.st.AuditNamespaces(e.ctx); err != nil || !slices.Equal(got, []string{"", "alpha", ns, "zeta"}) {
		t.Fatalf("AuditNamespaces = %q, %v; want the empty namespace first", got, err)
	}
}
