package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

var listCases = []testCase{
	{"NewestFirst", listNewestFirst},
	{"Filters", listFilters},
	{"Pagination", listPagination},
	{"PaginationSameInstant", listPaginationSameInstant},
	{"PaginationWithFilter", listPaginationFiltered},
	{"PaginationByStatuses", listPaginationStatuses},
	{"PaginationAcrossStatuses", listPaginationAcrossStatuses},
	{"PaginationOlderActiveRuns", listPaginationOlderActiveRuns},
	{"CountsPerStatus", listCountsPerStatus},
	{"DefaultLimit", listDefaultLimit},
	{"MalformedCursor", listMalformedCursor},
	{"Empty", listEmpty},
}

// createN creates n runs, advancing the clock by step before each, and returns their
// IDs newest first.
func (e *env) createN(n int, step time.Duration, opts ...runOpt) []string {
	e.t.Helper()
	ids := make([]string, 0, n)
	for range n {
		e.clk.Advance(step)
		ids = append(ids, e.create(opts...).ID)
	}
	slices.Reverse(ids)
	return ids
}

func listNewestFirst(t *testing.T, e *env) {
	apart := e.createN(3, time.Second)
	together := e.createN(3, 0) // same CreatedAt: Sequence decides
	res := e.list(store.RunListParams{})
	wantIDs(t, "RunList", runIDs(res.Runs), append(together, apart...))
	if res.NextCursor != "" {
		t.Fatalf("NextCursor = %q on the only page", res.NextCursor)
	}
	for i := 1; i < len(res.Runs); i++ {
		if res.Runs[i].Sequence >= res.Runs[i-1].Sequence {
			t.Fatalf("Sequence not decreasing: %d then %d", res.Runs[i-1].Sequence, res.Runs[i].Sequence)
		}
	}
}

func listFilters(t *testing.T, e *env) {
	t0 := e.clk.Now()
	r1 := e.create(withWorkflow("a"))
	e.clk.Advance(time.Second)
	r2 := e.create(withWorkflow("b"))
	e.claimOne(r2.ID, claimWorkflows("b"))
	e.clk.Advance(time.Second)
	r3 := e.create(withWorkflow("a"), withWorkflowID("key"))
	e.clk.Advance(time.Second)
	r4 := e.create(withWorkflow("a"), withPriority(10), withQueue("q2"))
	e.finish(e.claimOne(r4.ID, claimWorkflows("a")))
	e.create(withNamespace("ns2"), withWorkflow("a"))

	for _, c := range []struct {
		name string
		p    store.RunListParams
		want []string
	}{
		{"all", store.RunListParams{}, []string{r4.ID, r3.ID, r2.ID, r1.ID}},
		{"statuses", store.RunListParams{Statuses: []store.Status{store.StatusPending, store.StatusSucceeded}}, []string{r4.ID, r3.ID, r1.ID}},
		{"running", store.RunListParams{Statuses: []store.Status{store.StatusRunning}}, []string{r2.ID}},
		{"running and pending", store.RunListParams{Statuses: []store.Status{store.StatusRunning, store.StatusPending}}, []string{r3.ID, r2.ID, r1.ID}},
		{"a status twice", store.RunListParams{Statuses: []store.Status{store.StatusPending, store.StatusPending}}, []string{r3.ID, r1.ID}},
		{"workflow", store.RunListParams{Workflow: "a"}, []string{r4.ID, r3.ID, r1.ID}},
		{"workflow ID", store.RunListParams{WorkflowID: "key"}, []string{r3.ID}},
		{"queue", store.RunListParams{Queue: "q2"}, []string{r4.ID}},
		{"created after (inclusive)", store.RunListParams{CreatedAfter: t0.Add(time.Second)}, []string{r4.ID, r3.ID, r2.ID}},
		{"created before (exclusive)", store.RunListParams{CreatedBefore: t0.Add(2 * time.Second)}, []string{r2.ID, r1.ID}},
		{"all filters", store.RunListParams{Workflow: "a", CreatedAfter: t0.Add(time.Second), CreatedBefore: t0.Add(3 * time.Second),
			Statuses: []store.Status{store.StatusPending}}, []string{r3.ID}},
		{"no match", store.RunListParams{Workflow: "a", Statuses: []store.Status{store.StatusRunning}}, nil},
	} {
		res := e.list(c.p)
		wantIDs(t, "RunList "+c.name, runIDs(res.Runs), c.want)
	}
}

// wantPages lists with p page after page and checks page sizes and the IDs in order.
func (e *env) wantPages(p store.RunListParams, sizes []int, want []string) {
	e.t.Helper()
	var got []string
	for i, size := range sizes {
		res := e.list(p)
		if len(res.Runs) != size {
			e.t.Fatalf("page %d has %d runs, want %d", i+1, len(res.Runs), size)
		}
		got = append(got, runIDs(res.Runs)...)
		last := i == len(sizes)-1
		if last != (res.NextCursor == "") {
			e.t.Fatalf("page %d of %d: NextCursor = %q", i+1, len(sizes), res.NextCursor)
		}
		p.Cursor = res.NextCursor
	}
	wantIDs(e.t, "runs over all pages", got, want)
}

func listPagination(t *testing.T, e *env) {
	want := e.createN(25, time.Second)
	e.wantPages(store.RunListParams{Limit: 10}, []int{10, 10, 5}, want)
}

func listPaginationSameInstant(t *testing.T, e *env) {
	want := e.createN(25, 0)
	e.wantPages(store.RunListParams{Limit: 7}, []int{7, 7, 7, 4}, want)
}

// listPaginationStatuses pages through the runs of two statuses interleaved
// with a third's (a driver may read each status apart and merge them).
func listPaginationStatuses(t *testing.T, e *env) {
	var want []string
	for range 4 {
		e.clk.Advance(time.Millisecond)
		want = append(want, e.create(withWorkflow("p")).ID) // stays pending
		e.clk.Advance(time.Millisecond)
		r := e.create(withWorkflow("r"))
		e.claimOne(r.ID, claimWorkflows("r"))
		want = append(want, r.ID)
		e.clk.Advance(time.Millisecond)
		s := e.create(withWorkflow("s"))
		e.finish(e.claimOne(s.ID, claimWorkflows("s")))
	}
	slices.Reverse(want)
	e.wantPages(store.RunListParams{Limit: 3, Statuses: []store.Status{store.StatusRunning, store.StatusPending}},
		[]int{3, 3, 2}, want)
}

// listPaginationAcrossStatuses pages through the runs of every status, with
// no filter and with a workflow filter: a driver may read each status apart and
// merge them (Postgres has no index of every run in sequence order).
func listPaginationAcrossStatuses(t *testing.T, e *env) {
	var all, ofQ1 []string
	for i := range 5 {
		e.clk.Advance(time.Millisecond)
		p := e.create(withWorkflow("a"), withQueue("q1")) // stays pending
		e.clk.Advance(time.Millisecond)
		r := e.create(withWorkflow("b"))
		e.claimOne(r.ID, claimWorkflows("b"))
		e.clk.Advance(time.Millisecond)
		s := e.create(withWorkflow("c"), withQueue("q1"))
		e.finish(e.claimOne(s.ID, claimWorkflows("c")))
		all = append(all, p.ID, r.ID, s.ID)
		ofQ1 = append(ofQ1, p.ID, s.ID)
		if i == 2 {
			e.create(withNamespace("ns2"), withWorkflow("a"), withQueue("q1"))
		}
	}
	slices.Reverse(all)
	slices.Reverse(ofQ1)
	e.wantPages(store.RunListParams{Limit: 4}, []int{4, 4, 4, 3}, all)
	e.wantPages(store.RunListParams{Limit: 4, Queue: "q1"}, []int{4, 4, 2}, ofQ1)
}

// listPaginationOlderActiveRuns pages from finished runs into older active
// ones and back: a driver that reads the active statuses only above the page
// the finished runs fill (Postgres) must still find them once the finished
// runs fill less than a page.
func listPaginationOlderActiveRuns(t *testing.T, e *env) {
	var want []string
	add := func(n int, status store.Status) {
		for range n {
			e.clk.Advance(time.Millisecond)
			r := e.create(withWorkflow("w" + string(status)))
			switch status {
			case store.StatusRunning:
				e.claimOne(r.ID, claimWorkflows(r.Workflow))
			case store.StatusSucceeded:
				e.finish(e.claimOne(r.ID, claimWorkflows(r.Workflow)))
			}
			want = append(want, r.ID)
		}
	}
	add(3, store.StatusPending)
	add(2, store.StatusRunning)
	add(6, store.StatusSucceeded)
	add(1, store.StatusPending)
	add(5, store.StatusSucceeded)
	slices.Reverse(want)
	e.wantPages(store.RunListParams{Limit: 4}, []int{4, 4, 4, 4, 1}, want)
	e.wantPages(store.RunListParams{Limit: 20}, []int{17}, want)
	e.wantPages(store.RunListParams{Limit: 6, Statuses: []store.Status{store.StatusSucceeded, store.StatusPending}},
		[]int{6, 6, 3}, slices.DeleteFunc(slices.Clone(want), func(id string) bool { return slices.Contains(want[12:14], id) }))
}

// listCountsPerStatus counts runs per status (store.RunCounter, where the
// driver has it) with the list's filters and a cap, running runs among them
// (a driver may count each status through an index of its own).
func listCountsPerStatus(t *testing.T, e *env) {
	counter, ok := e.st.(store.RunCounter)
	if !ok {
		t.Skip("the store does not count runs per status")
	}
	t0 := e.clk.Now()
	for range 3 {
		e.create(withWorkflow("a"))
	}
	e.clk.Advance(time.Second)
	e.create(withWorkflow("b"), withQueue("q2"))
	e.create(withWorkflow("b"), withQueue("q2"))
	e.claim(claimWorkflows("a"), claimMax(2))                   // two of a run
	e.finish(e.claim(claimWorkflows("b"), claimMax(1)).Runs[0]) // one of b succeeds
	e.create(withNamespace("ns2"), withWorkflow("a"))
	for _, c := range []struct {
		name string
		p    store.RunCountsParams
		want map[store.Status]int64
		capd map[store.Status]bool
	}{
		{"all", store.RunCountsParams{}, map[store.Status]int64{store.StatusPending: 2, store.StatusRunning: 2, store.StatusSucceeded: 1}, nil},
		{"workflow", store.RunCountsParams{Workflow: "a"}, map[store.Status]int64{store.StatusPending: 1, store.StatusRunning: 2}, nil},
		{"queue", store.RunCountsParams{Queue: "q2"}, map[store.Status]int64{store.StatusPending: 1, store.StatusSucceeded: 1}, nil},
		{"created after", store.RunCountsParams{CreatedAfter: t0.Add(time.Second)}, map[store.Status]int64{store.StatusPending: 1, store.StatusSucceeded: 1}, nil},
		{"cap", store.RunCountsParams{Cap: 1}, map[store.Status]int64{store.StatusPending: 2, store.StatusRunning: 2, store.StatusSucceeded: 1},
			map[store.Status]bool{store.StatusPending: true, store.StatusRunning: true}},
	} {
		p := c.p
		p.Namespace = ns
		got, err := counter.RunCounts(e.ctx, &p)
		if err != nil {
			t.Fatalf("RunCounts(%s): %v", c.name, err)
		}
		for _, st := range store.AllStatuses {
			if got.Counts[st] != c.want[st] || got.Capped[st] != c.capd[st] {
				t.Errorf("RunCounts(%s): %s %d (capped %v), want %d (%v)", c.name, st, got.Counts[st], got.Capped[st], c.want[st], c.capd[st])
			}
		}
	}
}

func listPaginationFiltered(t *testing.T, e *env) {
	var want []string
	for range 12 {
		e.clk.Advance(time.Millisecond)
		want = append(want, e.create(withWorkflow("a")).ID)
		e.create(withWorkflow("b"))
	}
	slices.Reverse(want)
	e.wantPages(store.RunListParams{Workflow: "a", Limit: 5}, []int{5, 5, 2}, want)
}

func listDefaultLimit(t *testing.T, e *env) {
	want := e.createN(101, time.Microsecond)
	e.wantPages(store.RunListParams{}, []int{100, 1}, want)
}

func listMalformedCursor(t *testing.T, e *env) {
	e.create()
	for _, c := range []string{"!!not a cursor!!", "%%%", "\x00"} {
		_, err := e.st.RunList(e.ctx, &store.RunListParams{Namespace: ns, Cursor: c})
		wantErr(t, "RunList with cursor "+c, err, store.ErrInvalidParams)
	}
}

func listEmpty(t *testing.T, e *env) {
	e.create(withNamespace("ns2"))
	res := e.list(store.RunListParams{})
	if len(res.Runs) != 0 || res.NextCursor != "" {
		t.Fatalf("RunList of an empty namespace = %d runs, cursor %q", len(res.Runs), res.NextCursor)
	}
}
