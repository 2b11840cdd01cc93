package storeroute_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/internal/auth"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storeroute"
	"github.com/trellis-dev/trellis/store/storetest"
)

// fixture is a router with namespace "orders" routed to its own SQLite file
// and everything else in the control file, all on one fake clock.
type fixture struct {
	ctx             context.Context
	clk             *storetest.Clock
	control, orders store.Store
	r               store.Store
}

var t0 = time.Date(2031, 5, 6, 7, 8, 9, 0, time.UTC)

func setup(t *testing.T) *fixture {
	t.Helper()
	clk := storetest.NewClock(t0)
	control, orders := openSQLite(t, "control.db", clk.Now), openSQLite(t, "orders.db", clk.Now)
	return &fixture{ctx: t.Context(), clk: clk, control: control, orders: orders,
		r: route(t, control, map[string]store.Store{"orders": orders})}
}

func (f *fixture) create(t *testing.T, st store.Store, ns, id string, key *store.IdempotencyRecord) *store.Run {
	t.Helper()
	res, err := st.RunCreate(f.ctx, &store.RunCreateParams{Namespace: ns, ID: id, WorkflowID: "wf-" + id,
		Workflow: "wf", Queue: "default", Idempotency: key})
	if err != nil {
		t.Fatalf("RunCreate(%s/%s): %v", ns, id, err)
	}
	return res.Run
}

// has reports whether st holds run id of namespace ns.
func has(t *testing.T, st store.Store, ns, id string) bool {
	t.Helper()
	_, err := st.RunGet(context.Background(), &store.RunGetParams{Namespace: ns, Ref: id})
	switch {
	case err == nil:
		return true
	case errors.Is(err, store.ErrRunNotFound):
		return false
	}
	t.Fatalf("RunGet(%s/%s): %v", ns, id, err)
	return false
}

func TestNewRefusesBadRoutes(t *testing.T) {
	t.Parallel()
	clk := storetest.NewClock(t0)
	a, b := openSQLite(t, "a.db", clk.Now), openSQLite(t, "b.db", clk.Now)
	for name, tc := range map[string]struct {
		control store.Store
		routes  map[string]store.Store
		want    string
	}{
		"nil control":      {nil, map[string]store.Store{"orders": b}, "control store is nil"},
		"nil route":        {a, map[string]store.Store{"orders": nil}, `route "orders": the store is nil`},
		"empty namespace":  {a, map[string]store.Store{"": b}, "namespace name is required"},
		"bad namespace":    {a, map[string]store.Store{"a b": b}, `route "a b"`},
		"system namespace": {a, map[string]store.Store{auth.SystemNamespace: b}, "reserved"},
	} {
		t.Run(name, func(t *testing.T) {
			r, err := storeroute.New(tc.control, tc.routes)
			if err == nil || !strings.Contains(err.Error(), tc.want) || r != nil {
				t.Fatalf("New = %v, %v; want nil and an error with %q", r, err, tc.want)
			}
		})
	}
	// Nothing was closed: both stores still answer.
	for _, st := range []store.Store{a, b} {
		if _, err := st.NamespaceList(t.Context()); err != nil {
			t.Fatalf("a store after refused routes: %v", err)
		}
	}
}

// TestNamespaceCallsGoToTheirStore: a namespace's runs, record, queues,
// schedules, workers and idempotency keys are in its store and only there;
// tokens, keys, sessions and the audit log are in the control store.
func TestNamespaceCallsGoToTheirStore(t *testing.T) {
	t.Parallel()
	f := setup(t)
	key := func(k string) *store.IdempotencyRecord {
		return &store.IdempotencyRecord{Key: k, Fingerprint: []byte("fp-" + k)}
	}
	f.create(t, f.r, "orders", "o1", key("k-orders"))
	f.create(t, f.r, "default", "d1", key("k-default"))
	for _, c := range []struct {
		st       store.Store
		ns, id   string
		want     bool
		storeNam string
	}{
		{f.orders, "orders", "o1", true, "orders"}, {f.control, "orders", "o1", false, "control"},
		{f.control, "default", "d1", true, "control"}, {f.orders, "default", "d1", false, "orders"},
	} {
		if got := has(t, c.st, c.ns, c.id); got != c.want {
			t.Errorf("%s store holds %s/%s = %v, want %v", c.storeNam, c.ns, c.id, got, c.want)
		}
	}
	// The key is with the run it guards.
	if _, err := f.orders.IdempotencyGet(f.ctx, &store.IdempotencyGetParams{Namespace: "orders", Key: "k-orders"}); err != nil {
		t.Errorf("orders store: key of the orders run: %v", err)
	}
	if _, err := f.control.IdempotencyGet(f.ctx, &store.IdempotencyGetParams{Namespace: "orders", Key: "k-orders"}); !errors.Is(err, store.ErrIdempotencyKeyNotFound) {
		t.Errorf("control store: key of the orders run: %v, want ErrIdempotencyKeyNotFound", err)
	}
	if _, err := f.r.IdempotencyGet(f.ctx, &store.IdempotencyGetParams{Namespace: "orders", Key: "k-orders"}); err != nil {
		t.Errorf("router: key of the orders run: %v", err)
	}

	if _, err := f.r.NamespaceCreate(f.ctx, &store.NamespaceCreateParams{Name: "orders"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.r.QueueCreate(f.ctx, &store.QueueCreateParams{Namespace: "orders", Name: "fast"}); err != nil {
		t.Fatal(err)
	}
	if err := f.r.WorkerHeartbeat(f.ctx, &store.WorkerHeartbeatParams{Namespace: "orders", Name: "w1",
		Workflows: []string{"wf"}, TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.orders.NamespaceGet(f.ctx, &store.NamespaceGetParams{Name: "orders"}); err != nil {
		t.Errorf("orders store: namespace record: %v", err)
	}
	if _, err := f.control.NamespaceGet(f.ctx, &store.NamespaceGetParams{Name: "orders"}); !errors.Is(err, store.ErrNamespaceNotFound) {
		t.Errorf("control store: namespace record of orders: %v, want ErrNamespaceNotFound", err)
	}
	if _, err := f.orders.QueueGet(f.ctx, &store.QueueGetParams{Namespace: "orders", Name: "fast"}); err != nil {
		t.Errorf("orders store: queue: %v", err)
	}
	if ws, err := f.orders.WorkerList(f.ctx, &store.WorkerListParams{Namespace: "orders"}); err != nil || len(ws) != 1 {
		t.Errorf("orders store: workers = %v, %v; want w1", ws, err)
	}
	if ws, err := f.control.WorkerList(f.ctx, &store.WorkerListParams{Namespace: "orders"}); err != nil || len(ws) != 0 {
		t.Errorf("control store: workers of orders = %v, %v; want none", ws, err)
	}

	// What belongs to no namespace is the control store's.
	hash := make([]byte, store.TokenHashSize)
	if _, err := f.r.TokenCreate(f.ctx, &store.TokenCreateParams{Name: "t1", Hash: hash,
		Grants: []auth.Grant{{Role: auth.RoleAdmin, Namespace: "orders"}}}); err != nil {
		t.Fatal(err)
	}
	if err := f.r.AuditAppend(f.ctx, &store.AuditAppendParams{Entries: []store.AuditEntry{{Time: t0,
		Principal: "p", Action: "run.start", Target: store.AuditTarget{Namespace: "orders", Type: "run"}, Outcome: "ok"}}}); err != nil {
		t.Fatal(err)
	}
	for name, st := range map[string]store.Store{"control": f.control, "orders": f.orders} {
		toks, err := st.TokenList(f.ctx)
		if err != nil {
			t.Fatal(err)
		}
		audit, err := st.AuditList(f.ctx, &store.AuditListParams{})
		if err != nil {
			t.Fatal(err)
		}
		want := 0
		if name == "control" {
			want = 1
		}
		if len(toks) != want || len(audit.Entries) != want {
			t.Errorf("%s store: %d tokens and %d audit entries, want %d of each", name, len(toks), len(audit.Entries), want)
		}
	}
}

// TestListsMergeEveryStore: the calls over every namespace read every store,
// each for the namespaces routed to it only.
func TestListsMergeEveryStore(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.create(t, f.r, "orders", "o1", nil)
	f.create(t, f.r, "default", "d1", nil)
	f.create(t, f.r, "zeta", "z1", nil)
	// Records the orders store holds of a namespace it is not routed: the
	// router never shows them.
	f.create(t, f.orders, "stray", "s1", nil)
	if _, err := f.orders.NamespaceCreate(f.ctx, &store.NamespaceCreateParams{Name: "stray"}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{"orders", "zeta"} {
		if _, err := f.r.NamespaceCreate(f.ctx, &store.NamespaceCreateParams{Name: ns}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := f.r.RunNamespaces(f.ctx)
	if err != nil || !slices.Equal(got, []string{"default", "orders", "zeta"}) {
		t.Errorf("RunNamespaces = %v, %v; want [default orders zeta]", got, err)
	}
	nss, err := f.r.NamespaceList(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nss {
		names = append(names, n.Name)
	}
	want := []string{"orders", "zeta"}
	if ctl, _ := f.control.NamespaceList(f.ctx); slices.ContainsFunc(ctl, func(n *store.Namespace) bool { return n.Name == "default" }) {
		want = []string{"default", "orders", "zeta"} // a store that keeps a default record
	}
	if !slices.Equal(names, want) {
		t.Errorf("NamespaceList = %v, want %v", names, want)
	}

	spec := store.ScheduleSpec{Workflow: "wf", Queue: "default", Cron: "* * * * *", TimeZone: "UTC",
		Overlap: store.OverlapSkip, CatchupWindow: time.Minute}
	for _, ns := range []string{"zeta", "orders", "default"} {
		if _, err := f.r.ScheduleCreate(f.ctx, &store.ScheduleCreateParams{Namespace: ns, Name: "s", Spec: spec}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := f.orders.ScheduleCreate(f.ctx, &store.ScheduleCreateParams{Namespace: "stray", Name: "s", Spec: spec}); err != nil {
		t.Fatal(err)
	}
	scs, err := f.r.ScheduleList(f.ctx, &store.ScheduleListParams{})
	if err != nil {
		t.Fatal(err)
	}
	var where []string
	for _, sc := range scs {
		where = append(where, sc.Namespace)
	}
	if !slices.Equal(where, []string{"default", "orders", "zeta"}) {
		t.Errorf("ScheduleList() namespaces = %v, want [default orders zeta]", where)
	}

	counter := f.r.(store.QueueCounter)
	counts, err := counter.QueueCounts(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var counted []string
	for _, c := range counts {
		counted = append(counted, c.Namespace)
	}
	slices.Sort(counted)
	if !slices.Equal(counted, []string{"default", "orders", "zeta"}) {
		t.Errorf("QueueCounts namespaces = %v, want [default orders zeta]", counted)
	}
	for _, ns := range []string{"orders", "stray", "default"} {
		st := f.r
		if ns == "stray" {
			st = f.orders
		}
		if err := st.WorkerHeartbeat(f.ctx, &store.WorkerHeartbeatParams{Namespace: ns, Name: "w", Workflows: []string{"wf"}, TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	wc, err := f.r.(store.WorkerCounter).WorkerCounts(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(wc, func(a, b store.WorkerCount) int { return strings.Compare(a.Namespace, b.Namespace) })
	if len(wc) != 2 || wc[0].Namespace != "default" || wc[1].Namespace != "orders" {
		t.Errorf("WorkerCounts = %+v, want default and orders", wc)
	}
}
