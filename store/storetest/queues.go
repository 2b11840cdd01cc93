package storetest

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// Namespaces and queues as objects (store.QueueStore) and the limits a claim
// enforces.
var queueCases = []testCase{
	{"NamespaceCRUD", queueNamespaceCRUD},
	{"DefaultNamespace", queueDefaultNamespace},
	{"QueueCRUD", queueQueueCRUD},
	{"BadInput", queueBadInput},
	{"PauseResume", queuePauseResume},
	{"ConcurrencyLimitAcrossWorkers", queueConcurrencyLimit},
	{"LimitsUnderConcurrentClaims", queueConcurrentClaims},
	{"KeyLimitAndFairness", queueKeyLimit},
	{"RateLimit", queueRateLimit},
	{"CreateClaimRespectsLimits", queueCreateClaim},
	{"UnconfiguredAsBefore", queueUnconfigured},
}

func intp(n int) *int { return &n }

func (e *env) mkNamespace(name string) *store.Namespace {
	e.t.Helper()
	n, err := e.st.NamespaceCreate(e.ctx, &store.NamespaceCreateParams{Name: name})
	if err != nil {
		e.t.Fatalf("NamespaceCreate(%s): %v", name, err)
	}
	return n
}

func (e *env) mkQueue(p store.QueueCreateParams) *store.Queue {
	e.t.Helper()
	if p.Namespace == "" {
		p.Namespace = ns
	}
	if p.Name == "" {
		p.Name = queue
	}
	q, err := e.st.QueueCreate(e.ctx, &p)
	if err != nil {
		e.t.Fatalf("QueueCreate(%s/%s): %v", p.Namespace, p.Name, err)
	}
	return q
}

func (e *env) setPaused(paused bool) *store.Queue {
	e.t.Helper()
	q, err := e.st.QueueSetPaused(e.ctx, &store.QueueSetPausedParams{Namespace: ns, Name: queue, Paused: paused})
	if err != nil {
		e.t.Fatalf("QueueSetPaused(%v): %v", paused, err)
	}
	return q
}

func queueNamespaceCRUD(t *testing.T, e *env) {
	n := e.mkNamespace(ns)
	if n.Retention != store.DefaultRetention || n.DefaultQueue != store.DefaultQueueName || n.PayloadLimit != 0 {
		t.Fatalf("new namespace = %+v, want the defaults", n)
	}
	wantTime(t, "CreatedAt", n.CreatedAt, e.clk.Now())
	_, err := e.st.NamespaceCreate(e.ctx, &store.NamespaceCreateParams{Name: ns})
	wantErr(t, "NamespaceCreate twice", err, store.ErrNamespaceExists)
	e.mkNamespace("alpha")
	_, err = e.st.NamespaceCreate(e.ctx, &store.NamespaceCreateParams{Name: "b", Retention: store.Duration(time.Hour),
		DefaultQueue: "fast", PayloadLimit: 1024})
	if err != nil {
		t.Fatal(err)
	}
	got, err := e.st.NamespaceGet(e.ctx, &store.NamespaceGetParams{Name: "b"})
	if err != nil || got.Retention != store.Duration(time.Hour) || got.DefaultQueue != "fast" || got.PayloadLimit != 1024 {
		t.Fatalf("NamespaceGet(b) = %+v, %v", got, err)
	}
	later := e.clk.Advance(time.Minute)
	day := store.Duration(24 * time.Hour)
	up, err := e.st.NamespaceUpdate(e.ctx, &store.NamespaceUpdateParams{Name: "b", Retention: &day})
	if err != nil || up.Retention != day || up.DefaultQueue != "fast" || up.PayloadLimit != 1024 {
		t.Fatalf("NamespaceUpdate(b) = %+v, %v; want only the retention changed", up, err)
	}
	wantTime(t, "UpdatedAt", up.UpdatedAt, later)
	list, err := e.st.NamespaceList(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range list {
		names = append(names, n.Name)
	}
	wantIDs(t, "NamespaceList", names, []string{"alpha", "b", store.DefaultNamespace, ns})
	_, err = e.st.NamespaceGet(e.ctx, &store.NamespaceGetParams{Name: "nope"})
	wantErr(t, "NamespaceGet(unknown)", err, store.ErrNamespaceNotFound)
	_, err = e.st.NamespaceUpdate(e.ctx, &store.NamespaceUpdateParams{Name: "nope", Retention: &day})
	wantErr(t, "NamespaceUpdate(unknown)", err, store.ErrNamespaceNotFound)
}

// The namespace default has a record in a fresh store, with the defaults that a
// namespace without a record also has: its queues need no NamespaceCreate first.
func queueDefaultNamespace(t *testing.T, e *env) {
	d, err := e.st.NamespaceGet(e.ctx, &store.NamespaceGetParams{Name: store.DefaultNamespace})
	if err != nil {
		t.Fatalf("NamespaceGet(default) in a fresh store: %v", err)
	}
	if d.Retention != store.DefaultRetention || d.DefaultQueue != store.DefaultQueueName || d.PayloadLimit != 0 {
		t.Fatalf("namespace default = %+v, want the defaults", d)
	}
	_, err = e.st.NamespaceCreate(e.ctx, &store.NamespaceCreateParams{Name: store.DefaultNamespace})
	wantErr(t, "NamespaceCreate(default)", err, store.ErrNamespaceExists)
	q, err := e.st.QueueCreate(e.ctx, &store.QueueCreateParams{Namespace: store.DefaultNamespace, Name: "emails",
		QueueSettings: store.QueueSettings{ConcurrencyLimit: intp(2)}})
	if err != nil || q.ConcurrencyLimit != 2 {
		t.Fatalf("QueueCreate(default/emails) = %+v, %v", q, err)
	}
	week := store.Duration(7 * 24 * time.Hour)
	up, err := e.st.NamespaceUpdate(e.ctx, &store.NamespaceUpdateParams{Name: store.DefaultNamespace, Retention: &week})
	if err != nil || up.Retention != week {
		t.Fatalf("NamespaceUpdate(default) = %+v, %v", up, err)
	}
}

func queueQueueCRUD(t *testing.T, e *env) {
	_, err := e.st.QueueCreate(e.ctx, &store.QueueCreateParams{Namespace: ns, Name: queue})
	wantErr(t, "QueueCreate in an unknown namespace", err, store.ErrNamespaceNotFound)
	_, err = e.st.QueueList(e.ctx, &store.QueueListParams{Namespace: ns})
	wantErr(t, "QueueList of an unknown namespace", err, store.ErrNamespaceNotFound)
	e.mkNamespace(ns)
	rate := 2.5
	q := e.mkQueue(store.QueueCreateParams{QueueSettings: store.QueueSettings{ConcurrencyLimit: intp(3),
		KeyLimit: intp(1), RatePerSecond: &rate, PayloadLimit: intp(100), Priority: intp(7),
		Retry: &store.QueueRetry{MaxAttempts: 5, InitialBackoff: store.Duration(time.Second), MaxBackoff: store.Duration(time.Minute)}}})
	want := store.Queue{Namespace: ns, Name: queue, ConcurrencyLimit: 3, KeyLimit: 1, RatePerSecond: 2.5,
		RateBurst: 1, PayloadLimit: 100, Priority: 7}
	check := func(what string, got *store.Queue, want store.Queue) {
		t.Helper()
		r := got.Retry
		got2 := *got
		got2.Retry, got2.CreatedAt, got2.UpdatedAt = nil, time.Time{}, time.Time{}
		if got2 != want || r == nil || r.MaxAttempts != 5 || r.InitialBackoff != store.Duration(time.Second) {
			t.Fatalf("%s = %+v (retry %+v), want %+v", what, got2, r, want)
		}
	}
	check("QueueCreate", q, want)
	got, err := e.st.QueueGet(e.ctx, &store.QueueGetParams{Namespace: ns, Name: queue})
	if err != nil {
		t.Fatal(err)
	}
	check("QueueGet", got, want)
	_, err = e.st.QueueCreate(e.ctx, &store.QueueCreateParams{Namespace: ns, Name: queue})
	wantErr(t, "QueueCreate twice", err, store.ErrQueueExists)
	e.mkQueue(store.QueueCreateParams{Name: "a-first"})
	up, err := e.st.QueueUpdate(e.ctx, &store.QueueUpdateParams{Namespace: ns, Name: queue,
		QueueSettings: store.QueueSettings{ConcurrencyLimit: intp(9), RateBurst: intp(4)}})
	if err != nil {
		t.Fatal(err)
	}
	want.ConcurrencyLimit, want.RateBurst = 9, 4
	check("QueueUpdate", up, want)
	got, _ = e.st.QueueGet(e.ctx, &store.QueueGetParams{Namespace: ns, Name: queue})
	check("QueueGet after update", got, want)
	list, err := e.st.QueueList(e.ctx, &store.QueueListParams{Namespace: ns})
	if err != nil || len(list) != 2 || list[0].Name != "a-first" || list[1].Name != queue || list[0].Restricted() {
		t.Fatalf("QueueList = %+v, %v", list, err)
	}
	_, err = e.st.QueueGet(e.ctx, &store.QueueGetParams{Namespace: ns, Name: "nope"})
	wantErr(t, "QueueGet(unknown)", err, store.ErrQueueNotFound)
	_, err = e.st.QueueUpdate(e.ctx, &store.QueueUpdateParams{Namespace: ns, Name: "nope",
		QueueSettings: store.QueueSettings{KeyLimit: intp(1)}})
	wantErr(t, "QueueUpdate(unknown)", err, store.ErrQueueNotFound)
	_, err = e.st.QueueSetPaused(e.ctx, &store.QueueSetPausedParams{Namespace: ns, Name: "nope", Paused: true})
	wantErr(t, "QueueSetPaused(unknown)", err, store.ErrQueueNotFound)
}

// queueBadInput: invalid names, the system namespace, limits of zero or below; each
// a clear error, and nothing changed.
func queueBadInput(t *testing.T, e *env) {
	e.mkNamespace(ns)
	e.mkQueue(store.QueueCreateParams{QueueSettings: store.QueueSettings{ConcurrencyLimit: intp(2)}})
	zero, neg, negRate := 0, -1, -0.5
	negDur := store.Duration(-time.Hour)
	bad := map[string]func() error{
		"namespace __system__": func() error {
			_, err := e.st.NamespaceCreate(e.ctx, &store.NamespaceCreateParams{Name: "__system__"})
			return err
		},
		"empty namespace name": func() error {
			_, err := e.st.NamespaceCreate(e.ctx, &store.NamespaceCreateParams{Name: ""})
			return err
		},
		"namespace name with a space": func() error {
			_, err := e.st.NamespaceCreate(e.ctx, &store.NamespaceCreateParams{Name: "a b"})
			return err
		},
		"namespace name with a slash": func() error {
			_, err := e.st.NamespaceCreate(e.ctx, &store.NamespaceCreateParams{Name: "a/b"})
			return err
		},
		"namespace name with a wildcard": func() error {
			_, err := e.st.NamespaceCreate(e.ctx, &store.NamespaceCreateParams{Name: "ns*"})
			return err
		},
		"namespace name not of the pattern": func() error {
			_, err := e.st.NamespaceCreate(e.ctx, &store.NamespaceCreateParams{Name: "-ns"})
			return err
		},
		"default queue with a slash": func() error {
			_, err := e.st.NamespaceCreate(e.ctx, &store.NamespaceCreateParams{Name: "x", DefaultQueue: "a/b"})
			return err
		},
		"queue name with a slash": func() error {
			_, err := e.st.QueueCreate(e.ctx, &store.QueueCreateParams{Namespace: ns, Name: "a/b"})
			return err
		},
		"queue name with a backslash": func() error {
			_, err := e.st.QueueCreate(e.ctx, &store.QueueCreateParams{Namespace: ns, Name: `a\b`})
			return err
		},
		"queue name with a wildcard": func() error {
			_, err := e.st.QueueCreate(e.ctx, &store.QueueCreateParams{Namespace: ns, Name: "q*"})
			return err
		},
		"queue name ..": func() error {
			_, err := e.st.QueueCreate(e.ctx, &store.QueueCreateParams{Namespace: ns, Name: ".."})
			return err
		},
		"queue name with a no-break space": func() error {
			_, err := e.st.QueueCreate(e.ctx, &store.QueueCreateParams{Namespace: ns, Name: "a\u00a0b"})
			return err
		},
		"queue name not UTF-8": func() error {
			_, err := e.st.QueueCreate(e.ctx, &store.QueueCreateParams{Namespace: ns, Name: "q\xff"})
			return err
		},
		"negative retention": func() error {
			_, err := e.st.NamespaceCreate(e.ctx, &store.NamespaceCreateParams{Name: "x", Retention: store.Duration(-time.Hour)})
			return err
		},
		"namespace update negative retention": func() error {
			_, err := e.st.NamespaceUpdate(e.ctx, &store.NamespaceUpdateParams{Name: ns, Retention: &negDur})
			return err
		},
		"namespace update payload limit 0": func() error {
			_, err := e.st.NamespaceUpdate(e.ctx, &store.NamespaceUpdateParams{Name: ns, PayloadLimit: &zero})
			return err
		},
		"queue in __system__": func() error {
			_, err := e.st.QueueCreate(e.ctx, &store.QueueCreateParams{Namespace: "__system__", Name: "q"})
			return err
		},
		"queue concurrency 0": func() error {
			_, err := e.st.QueueCreate(e.ctx, &store.QueueCreateParams{Namespace: ns, Name: "q",
				QueueSettings: store.QueueSettings{ConcurrencyLimit: &zero}})
			return err
		},
		"queue key limit -1": func() error {
			_, err := e.st.QueueCreate(e.ctx, &store.QueueCreateParams{Namespace: ns, Name: "q",
				QueueSettings: store.QueueSettings{KeyLimit: &neg}})
			return err
		},
		"queue negative rate": func() error {
			_, err := e.st.QueueCreate(e.ctx, &store.QueueCreateParams{Namespace: ns, Name: "q",
				QueueSettings: store.QueueSettings{RatePerSecond: &negRate}})
			return err
		},
		"queue update concurrency 0": func() error {
			_, err := e.st.QueueUpdate(e.ctx, &store.QueueUpdateParams{Namespace: ns, Name: queue,
				QueueSettings: store.QueueSettings{ConcurrencyLimit: &zero}})
			return err
		},
		"queue update burst -1": func() error {
			_, err := e.st.QueueUpdate(e.ctx, &store.QueueUpdateParams{Namespace: ns, Name: queue,
				QueueSettings: store.QueueSettings{RateBurst: &neg}})
			return err
		},
		"queue retry 0 attempts": func() error {
			_, err := e.st.QueueUpdate(e.ctx, &store.QueueUpdateParams{Namespace: ns, Name: queue,
				QueueSettings: store.QueueSettings{Retry: &store.QueueRetry{}}})
			return err
		},
		"pause in __system__": func() error {
			_, err := e.st.QueueSetPaused(e.ctx, &store.QueueSetPausedParams{Namespace: "__system__", Name: queue, Paused: true})
			return err
		},
	}
	for what, fn := range bad {
		wantErr(t, what, fn(), store.ErrInvalidParams)
	}
	list, err := e.st.NamespaceList(e.ctx)
	if err != nil || len(list) != 2 {
		t.Fatalf("namespaces after bad input = %d, %v; want default and ns", len(list), err)
	}
	for _, n := range list {
		if n.Retention != store.DefaultRetention || n.PayloadLimit != 0 {
			t.Fatalf("namespace after bad input = %+v; want it unchanged", n)
		}
	}
	qs, err := e.st.QueueList(e.ctx, &store.QueueListParams{Namespace: ns})
	if err != nil || len(qs) != 1 || qs[0].ConcurrencyLimit != 2 || qs[0].RateBurst != 0 || qs[0].Retry != nil {
		t.Fatalf("queues after bad input = %+v, %v; want the queue unchanged", qs, err)
	}
	// Resuming a queue that is not paused, pausing a paused one.
	_, err = e.st.QueueSetPaused(e.ctx, &store.QueueSetPausedParams{Namespace: ns, Name: queue, Paused: false})
	wantErr(t, "resume of a queue not paused", err, store.ErrQueueState)
	e.setPaused(true)
	_, err = e.st.QueueSetPaused(e.ctx, &store.QueueSetPausedParams{Namespace: ns, Name: queue, Paused: true})
	wantErr(t, "pause of a paused queue", err, store.ErrQueueState)
	if q, _ := e.st.QueueGet(e.ctx, &store.QueueGetParams{Namespace: ns, Name: queue}); q == nil || !q.Paused {
		t.Fatalf("queue after a second pause = %+v, want paused", q)
	}
}

// queuePauseResume: a paused queue accepts runs, nobody claims them, the running ones
// finish; other queues go on; resume signals TopicReady and the runs are claimed.
func queuePauseResume(t *testing.T, e *env) {
	e.mkNamespace(ns)
	e.mkQueue(store.QueueCreateParams{})
	running := e.start()
	if q := e.setPaused(true); !q.Paused {
		t.Fatalf("paused queue = %+v", q)
	}
	r1, r2 := e.create(), e.create()
	other := e.create(withQueue("other"))
	wantIDs(t, "claim while paused", e.claimIDs(), []string{other.ID})
	e.finish(running)
	e.wantStatus(running.Run.ID, store.StatusSucceeded)
	e.wantNoClaim()
	ready, stop, err := e.st.Subscribe(e.ctx, store.TopicReady)
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	if q := e.setPaused(false); q.Paused {
		t.Fatalf("resumed queue = %+v", q)
	}
	wantSignal(t, "TopicReady after resume", ready)
	wantIDs(t, "claim after resume", e.claimIDs(), []string{r1.ID, r2.ID})
}

// queueConcurrencyLimit: two workers claim from a queue of limit 2: two runs run,
// however many each asks for; a finished one frees a slot.
func queueConcurrencyLimit(t *testing.T, e *env) {
	e.mkNamespace(ns)
	e.mkQueue(store.QueueCreateParams{QueueSettings: store.QueueSettings{ConcurrencyLimit: intp(2)}})
	for range 5 {
		e.create()
	}
	free := e.create(withQueue("free"))
	a := e.claim(claimBy("worker-a"), claimMax(1)).Runs
	b := e.claim(claimBy("worker-b"), claimMax(10)).Runs
	if len(a) != 1 || len(b) != 2 {
		t.Fatalf("claims of workers a, b = %v, %v; want 1 and 2 (one limited, one free)", claimedIDs(a), claimedIDs(b))
	}
	if !slices.Contains(claimedIDs(b), free.ID) {
		t.Fatalf("worker b claimed %v, want the run of the free queue among them", claimedIDs(b))
	}
	res := e.claim(claimBy("worker-b"))
	if len(res.Runs) != 0 {
		t.Fatalf("claim at the limit = %v, want none", claimedIDs(res.Runs))
	}
	if res.NextDue == nil || res.NextDue.After(e.clk.Now().Add(time.Second)) {
		t.Fatalf("NextDue at the limit = %v, want a poll within a second", res.NextDue)
	}
	e.finish(a[0])
	if ids := e.claimIDs(claimBy("worker-a")); len(ids) != 1 {
		t.Fatalf("claim after a run finished = %v, want 1", ids)
	}
	// A raised limit takes effect at once.
	if _, err := e.st.QueueUpdate(e.ctx, &store.QueueUpdateParams{Namespace: ns, Name: queue,
		QueueSettings: store.QueueSettings{ConcurrencyLimit: intp(10)}}); err != nil {
		t.Fatal(err)
	}
	if ids := e.claimIDs(); len(ids) != 2 {
		t.Fatalf("claim after raising the limit = %v, want the 2 left", ids)
	}
}

// queueKeyLimit: with a key limit of 1, runs of one key run one at a time, in order;
// a key with a long backlog does not hold back the others, and keys with fewer
// running runs go first.
func queueKeyLimit(t *testing.T, e *env) {
	e.mkNamespace(ns)
	e.mkQueue(store.QueueCreateParams{QueueSettings: store.QueueSettings{KeyLimit: intp(2)}})
	key := func(k string) runOpt { return func(p *store.RunCreateParams) { p.ConcurrencyKey = k } }
	var a []string
	for range 6 {
		a = append(a, e.create(key("a")).ID)
	}
	b1, b2 := e.create(key("b")), e.create(key("b"))
	e.create(key("b"))
	c1 := e.create(key("c"))
	none := e.create()
	// One at a time: each claim takes the key with the fewest running runs.
	var crs []*store.ClaimedRun
	for range 6 {
		crs = append(crs, e.claim(claimMax(1)).Runs...)
	}
	got := claimedIDs(crs)
	// a, b and c in turn (the key with the fewest running runs first), then a run
	// without a key in its place in claim order.
	wantIDs(t, "claims one by one", got, []string{a[0], b1.ID, c1.ID, a[1], b2.ID, none.ID})
	// a and b are at their limit: nothing.
	res := e.claim()
	if len(res.Runs) != 0 {
		t.Fatalf("claim with keys at their limit = %v, want none", claimedIDs(res.Runs))
	}
	if res.NextDue == nil {
		t.Fatal("NextDue with keys at their limit = nil, want a poll")
	}
	// A run of a finishes: the next run of a, in order, takes its place.
	e.finish(crs[0])
	e.claimOne(a[2])
}

// queueRateLimit: a queue of 2 runs per second with a burst of 3 starts 3 at once,
// then 2 per second of the clock.
func queueRateLimit(t *testing.T, e *env) {
	e.mkNamespace(ns)
	rate := 2.0
	e.mkQueue(store.QueueCreateParams{QueueSettings: store.QueueSettings{RatePerSecond: &rate, RateBurst: intp(3)}})
	for range 10 {
		e.create()
	}
	if ids := e.claimIDs(); len(ids) != 3 {
		t.Fatalf("first claim = %v, want the burst of 3", ids)
	}
	res := e.claim(claimBy("worker-2"))
	if len(res.Runs) != 0 {
		t.Fatalf("claim with no tokens = %v, want none", claimedIDs(res.Runs))
	}
	if res.NextDue == nil || !sameTime(*res.NextDue, e.clk.Now().Add(500*time.Millisecond)) {
		t.Fatalf("NextDue with no tokens = %v, want the next token at +500ms", res.NextDue)
	}
	e.clk.Advance(500 * time.Millisecond)
	if ids := e.claimIDs(claimBy("worker-2")); len(ids) != 1 {
		t.Fatalf("claim after 500ms = %v, want 1", ids)
	}
	e.clk.Advance(time.Second)
	if ids := e.claimIDs(); len(ids) != 2 {
		t.Fatalf("claim after one more second = %v, want 2", ids)
	}
	// Tokens never pile up beyond the burst.
	e.clk.Advance(time.Hour)
	if ids := e.claimIDs(); len(ids) != 3 {
		t.Fatalf("claim after an hour = %v, want the burst of 3", ids)
	}
}

// queueCreateClaim: a run created with a claim in a limited queue is created
// pending, for an ordinary claim that respects the limits.
func queueCreateClaim(t *testing.T, e *env) {
	e.mkNamespace(ns)
	e.mkQueue(store.QueueCreateParams{Paused: true})
	p := e.params()
	p.Claim = &store.CreateClaim{Worker: worker, LeaseDuration: leaseDur}
	res, err := e.st.RunCreate(e.ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Claimed != nil || res.Run.Status != store.StatusPending {
		t.Fatalf("create with claim in a paused queue = %+v, want a pending run, not claimed", res.Run)
	}
	e.wantStatus(p.ID, store.StatusPending)
	e.wantNoClaim()
	e.setPaused(false)
	e.claimOne(p.ID)
}

// queueUnconfigured: runs of a namespace and queue without records behave as
// before; a record of another namespace changes nothing for them.
func queueUnconfigured(t *testing.T, e *env) {
	e.mkNamespace("other")
	e.mkQueue(store.QueueCreateParams{Namespace: "other", Paused: true})
	var want []string
	for range 3 {
		want = append(want, e.create().ID)
	}
	wantIDs(t, "claim in an unconfigured namespace", e.claimIDs(), want)
	r := e.create(withNamespace("other"))
	e.wantNoClaim(claimIn("other"))
	e.getIn("other", r.ID)
}

// queueConcurrentClaims: eight workers claim at once, again and again, from a queue
// with a concurrency limit of 3 and a key limit of 1 (two keys), finishing what
// they claim: the limits hold at every instant, and every run is claimed once.
func queueConcurrentClaims(t *testing.T, e *env) {
	e.mkNamespace(ns)
	e.mkQueue(store.QueueCreateParams{QueueSettings: store.QueueSettings{ConcurrencyLimit: intp(3), KeyLimit: intp(1)}})
	const n = 60
	keys := map[string]string{} // run ID -> key
	for i := range n {
		p := e.params()
		if i%3 != 0 {
			p.ConcurrencyKey = fmt.Sprintf("key-%d", i%3)
		}
		keys[p.ID] = p.ConcurrencyKey
		if _, err := e.st.RunCreate(e.ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	var (
		mu         sync.Mutex
		running    int
		keyRunning = map[string]int{}
		seen       = map[string]bool{}
		wg         sync.WaitGroup
		errs       = make(chan error, 8)
	)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for idle := 0; idle < 50; {
				res, err := e.st.RunsClaim(e.ctx, claimParams(claimBy(fmt.Sprintf("w-%d", w)), claimMax(2)))
				if err != nil {
					errs <- err
					return
				}
				if len(res.Runs) == 0 {
					idle++
					mu.Lock()
					done := len(seen) == n
					mu.Unlock()
					if done {
						return
					}
					continue
				}
				mu.Lock()
				for _, cr := range res.Runs {
					if seen[cr.Run.ID] {
						errs <- fmt.Errorf("run %s claimed twice", cr.Run.ID)
					}
					seen[cr.Run.ID] = true
					running++
					key := keys[cr.Run.ID]
					if key != "" {
						keyRunning[key]++
						if keyRunning[key] > 1 {
							errs <- fmt.Errorf("key %s: %d running, limit 1", key, keyRunning[key])
						}
					}
				}
				if running > 3 {
					errs <- fmt.Errorf("%d running, limit 3", running)
				}
				mu.Unlock()
				for _, cr := range res.Runs {
					// Count the run out before it ends (a claim may take its slot
					// once it has): these counts never exceed the store's.
					mu.Lock()
					running--
					if key := keys[cr.Run.ID]; key != "" {
						keyRunning[key]--
					}
					mu.Unlock()
					_, err := e.st.Checkpoint(e.ctx, &store.CheckpointParams{Lease: cr.Lease(), Status: store.StatusSucceeded})
					if err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(seen) != n {
		t.Fatalf("%d runs claimed, want %d", len(seen), n)
	}
}
