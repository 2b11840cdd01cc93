package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

var claimCases = []testCase{
	{"InvalidParams", claimInvalidParams},
	{"ClaimedRun", claimClaimedRun},
	{"OnlyDue", claimOnlyDue},
	{"Filters", claimFilters},
	{"Max", claimMax3},
	{"OrderPriorityFirst", claimOrderPriority},
	{"OrderTies", claimOrderTies},
	{"NotTwiceWhileLeased", claimNotTwice},
	{"Concurrent", claimConcurrent},
	{"ExpiredLeaseReclaimed", claimExpiredLease},
	{"TokensAboveAfterClockSetBack", claimClockSetBack},
	{"WaitingRuns", claimWaiting},
	{"History", claimHistory},
	{"NextDue", claimNextDue},
	{"NextDueOfAFullClaim", claimNextDueFull},
}

func claimInvalidParams(t *testing.T, e *env) {
	r := e.create()
	for what, opt := range map[string]claimOpt{
		"no workflows":        func(p *store.RunsClaimParams) { p.Workflows = nil },
		"max 0":               claimMax(0),
		"max -1":              claimMax(-1),
		"lease duration 0":    func(p *store.RunsClaimParams) { p.LeaseDuration = 0 },
		"negative lease time": func(p *store.RunsClaimParams) { p.LeaseDuration = -time.Second },
	} {
		_, err := e.st.RunsClaim(e.ctx, claimParams(opt))
		wantErr(t, "RunsClaim with "+what, err, store.ErrInvalidParams)
	}
	e.wantStatus(r.ID, store.StatusPending)
	e.claimOne(r.ID)
}

func claimClaimedRun(t *testing.T, e *env) {
	r := e.create()
	now := e.clk.Advance(time.Second)
	cr := e.claimOne(r.ID, claimBy("w-7"))
	got := e.get(r.ID)
	for _, run := range []*store.Run{cr.Run, got} {
		if run.Status != store.StatusRunning || run.LeaseOwner != "w-7" || run.Attempts != 1 {
			t.Fatalf("claimed run = %+v, want running, owner w-7, 1 attempt", run)
		}
		wantTimePtr(t, "StartedAt", run.StartedAt, now)
		wantTimePtr(t, "Run.LeaseExpiresAt", run.LeaseExpiresAt, now.Add(leaseDur))
	}
	wantTime(t, "ClaimedRun.LeaseExpiresAt", cr.LeaseExpiresAt, now.Add(leaseDur))
	if len(cr.History) != 0 {
		t.Fatalf("history of a new run = %v, want empty", opNames(cr.History))
	}
}

func claimOnlyDue(t *testing.T, e *env) {
	r := e.create(withAvailableAt(e.clk.Now().Add(time.Minute)))
	e.wantNoClaim()
	e.clk.Advance(time.Minute - time.Microsecond)
	e.wantNoClaim()
	e.clk.Advance(time.Microsecond)
	e.claimOne(r.ID)
}

func claimFilters(t *testing.T, e *env) {
	want := e.create(withQueue("q1"))
	e.create(withQueue("q2"))
	e.create(withQueue("q1"), withWorkflow("other"))
	elsewhere := e.create(withQueue("q1"), withNamespace("ns2"))
	inQ1 := func(p *store.RunsClaimParams) { p.Queues = []string{"q1"} }
	wantIDs(t, "claim of wf in q1", e.claimIDs(inQ1), []string{want.ID})
	// Empty Queues means every queue; the other workflow and namespace stay out.
	ids := e.claimIDs()
	if len(ids) != 1 || ids[0] == want.ID {
		t.Fatalf("claim of wf in all queues = %v, want only the run in q2", ids)
	}
	both := func(p *store.RunsClaimParams) { p.Workflows = []string{"nope", "other"} }
	if ids := e.claimIDs(both); len(ids) != 1 {
		t.Fatalf("claim of workflow other = %v, want one run", ids)
	}
	e.wantNoClaim(func(p *store.RunsClaimParams) { p.Workflows = []string{wf, "other"} })
	if r := e.getIn("ns2", elsewhere.ID); r.Status != store.StatusPending {
		t.Fatalf("run of namespace ns2 = %s, want pending", r.Status)
	}
}

func claimMax3(t *testing.T, e *env) {
	for range 5 {
		e.create()
	}
	if ids := e.claimIDs(claimMax(3)); len(ids) != 3 {
		t.Fatalf("claim of max 3 = %v", ids)
	}
	if ids := e.claimIDs(claimMax(3)); len(ids) != 2 {
		t.Fatalf("second claim of max 3 = %v, want the 2 left", ids)
	}
}

// claimOrder claims one run at a time and returns the order.
func (e *env) claimOrder(n int) []string {
	e.t.Helper()
	var ids []string
	for range n {
		got := e.claimIDs(claimMax(1))
		if len(got) != 1 {
			e.t.Fatalf("claim %d found %v, want one run", len(ids)+1, got)
		}
		ids = append(ids, got[0])
	}
	return ids
}

func claimOrderPriority(t *testing.T, e *env) {
	old := e.create(withPriority(0))
	e.clk.Advance(time.Minute)
	urgent := e.create(withPriority(5))
	mid := e.create(withPriority(2), withAvailableAt(epoch.Add(-time.Hour)))
	// urgent became available last; priority still comes first.
	wantIDs(t, "claim order", e.claimOrder(3), []string{urgent.ID, mid.ID, old.ID})
}

func claimOrderTies(t *testing.T, e *env) {
	now := e.clk.Now()
	// Same priority: available_at first, then sequence.
	late := e.create(withAvailableAt(now.Add(-time.Second)))
	early := e.create(withAvailableAt(now.Add(-2 * time.Second)))
	sameA := e.create(withAvailableAt(now.Add(-3 * time.Second)))
	sameB := e.create(withAvailableAt(now.Add(-3 * time.Second)))
	wantIDs(t, "claim order", e.claimOrder(4), []string{sameA.ID, sameB.ID, early.ID, late.ID})
}

func claimNotTwice(t *testing.T, e *env) {
	a, b := e.create(), e.create()
	wantIDSet(t, "first claim", e.claimIDs(), []string{a.ID, b.ID})
	e.wantNoClaim(claimBy("worker-2"))
	e.clk.Advance(leaseDur - time.Microsecond)
	e.wantNoClaim(claimBy("worker-2"))
}

func claimConcurrent(t *testing.T, e *env) {
	const runs, claimers = 100, 8
	for range runs {
		e.create()
	}
	var mu sync.Mutex
	counts := map[string]int{}
	var wg sync.WaitGroup
	for i := range claimers {
		wg.Go(func() {
			p := claimParams(claimMax(3), claimBy(fmt.Sprintf("w%d", i)))
			for {
				res, err := e.st.RunsClaim(e.ctx, p)
				if err != nil {
					t.Errorf("claimer %d: RunsClaim: %v", i, err)
					return
				}
				if len(res.Runs) == 0 {
					return
				}
				mu.Lock()
				for _, cr := range res.Runs {
					counts[cr.Run.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(counts) != runs {
		t.Fatalf("%d distinct runs claimed, want %d", len(counts), runs)
	}
	for id, n := range counts {
		if n != 1 {
			t.Fatalf("run %s claimed %d times, want once", id, n)
		}
	}
}

func claimExpiredLease(t *testing.T, e *env) {
	first := e.start()
	e.clk.Advance(leaseDur - time.Microsecond)
	e.wantNoClaim()
	now := e.clk.Advance(time.Microsecond)
	second := e.claimOne(first.Run.ID, claimBy("worker-2"))
	if second.LeaseToken <= first.LeaseToken {
		t.Fatalf("token after expiry = %d, want > %d", second.LeaseToken, first.LeaseToken)
	}
	if second.Run.Attempts != 2 || second.Run.LeaseOwner != "worker-2" {
		t.Fatalf("reclaimed run = %+v, want attempt 2 by worker-2", second.Run)
	}
	wantTime(t, "LeaseExpiresAt", second.LeaseExpiresAt, now.Add(leaseDur))
	err := e.checkpointErr(first, store.CheckpointParams{Status: store.StatusRunning})
	wantErr(t, "Checkpoint with the expired token", err, store.ErrLeaseLost)
	err = e.st.LeaseRelease(e.ctx, &store.LeaseReleaseParams{Lease: first.Lease()})
	wantErr(t, "LeaseRelease with the expired token", err, store.ErrLeaseLost)
	e.checkpoint(second, store.CheckpointParams{Status: store.StatusRunning})
	if r := e.wantStatus(first.Run.ID, store.StatusRunning); r.LeaseOwner != "worker-2" {
		t.Fatalf("lease owner = %q, want worker-2", r.LeaseOwner)
	}
}

// claimClockSetBack: a claim's new tokens are above every token its runs had,
// even after the clock was set back. In one claim, a run whose token is at or
// above the clock gets its token plus one and a fresh run the clock's; the lease
// before is fenced off.
func claimClockSetBack(t *testing.T, e *env) {
	first := e.start()
	e.clk.Set(e.clk.Now().Add(-time.Hour))
	if err := e.st.LeaseRelease(e.ctx, &store.LeaseReleaseParams{Lease: first.Lease()}); err != nil {
		t.Fatalf("LeaseRelease: %v", err)
	}
	fresh := e.create()
	res := e.claim()
	tokens := map[string]int64{}
	for _, cr := range res.Runs {
		tokens[cr.Run.ID] = cr.LeaseToken
	}
	if len(res.Runs) != 2 {
		t.Fatalf("claimed %v, want %s and %s", claimedIDs(res.Runs), first.Run.ID, fresh.ID)
	}
	if got := tokens[first.Run.ID]; got <= first.LeaseToken {
		t.Fatalf("token of the run claimed again = %d, want above its token before, %d", got, first.LeaseToken)
	}
	if got := tokens[fresh.ID]; got <= 0 {
		t.Fatalf("token of the fresh run = %d", got)
	}
	err := e.checkpointErr(first, store.CheckpointParams{Status: store.StatusRunning})
	wantErr(t, "Checkpoint with the token before", err, store.ErrLeaseLost)
	for _, cr := range res.Runs {
		e.checkpoint(cr, store.CheckpointParams{Status: store.StatusSucceeded})
	}
}

func claimWaiting(t *testing.T, e *env) {
	timer := e.start()
	e.checkpoint(timer, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "sleep",
		WakeAt: new(e.clk.Now().Add(10 * time.Second))})
	forever := e.start()
	e.checkpoint(forever, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "event"})
	e.wantNoClaim()
	e.clk.Advance(10 * time.Second)
	cr := e.claimOne(timer.Run.ID)
	if cr.LeaseToken <= timer.LeaseToken || cr.Run.Attempts != 2 {
		t.Fatalf("woken run: token %d (was %d), attempts %d; want a greater token, attempt 2",
			cr.LeaseToken, timer.LeaseToken, cr.Run.Attempts)
	}
	e.clk.Advance(24 * time.Hour)
	wantIDs(t, "claim a day later", e.claimIDs(), []string{timer.Run.ID}) // its lease expired
	e.wantStatus(forever.Run.ID, store.StatusWaiting)
}

func claimHistory(t *testing.T, e *env) {
	cr := e.start()
	started := e.clk.Now()
	e.clk.Advance(time.Second)
	failed := &store.Op{Position: 1, Kind: store.OpStep, Name: "charge", Attempts: 1, StartedAt: started,
		Error: &store.ErrorInfo{Message: "card declined", Type: "*errors.errorString"}}
	e.checkpoint(cr, store.CheckpointParams{
		Status:   store.StatusPending,
		Ops:      []*store.Op{failed, e.doneStep(0, "reserve", `"r-1"`)},
		Attempts: []store.Attempt{{Position: 1, Attempt: 1, Error: *failed.Error, StartedAt: started, FinishedAt: e.clk.Now()}},
	})
	again := e.claimOne(cr.Run.ID)
	h := again.History
	if len(h) != 2 || h[0].Position != 0 || h[1].Position != 1 {
		t.Fatalf("claimed history positions = %v, want [0 1]", opPositions(h))
	}
	if h[0].Name != "reserve" || !h[0].Done || string(h[0].Result) != `"r-1"` || len(h[0].AttemptLog) != 0 {
		t.Fatalf("op 0 = %+v, want done step reserve with result", h[0])
	}
	if h[1].Name != "charge" || h[1].Done || h[1].Attempts != 1 || len(h[1].AttemptLog) != 1 ||
		h[1].AttemptLog[0].Error.Message != "card declined" {
		t.Fatalf("op 1 = %+v, want undone step charge with one failed attempt", h[1])
	}
}

func opPositions(ops []*store.Op) []int {
	ps := make([]int, 0, len(ops))
	for _, op := range ops {
		ps = append(ps, op.Position)
	}
	return ps
}

func claimNextDue(t *testing.T, e *env) {
	if res := e.claim(); res.NextDue != nil {
		t.Fatalf("NextDue of an empty store = %v, want nil", *res.NextDue)
	}
	t0 := e.clk.Now()
	sleeper := e.start()
	e.checkpoint(sleeper, store.CheckpointParams{Status: store.StatusWaiting, WaitReason: "sleep",
		WakeAt: new(t0.Add(5 * time.Second))})
	e.create(withAvailableAt(t0.Add(10 * time.Second)))
	e.create(withWorkflow("other"), withAvailableAt(t0.Add(2*time.Second)))
	res := e.claim()
	if len(res.Runs) != 0 {
		t.Fatalf("claimed %v before anything is due", claimedIDs(res.Runs))
	}
	wantTimePtr(t, "NextDue with a timer at +5s", res.NextDue, t0.Add(5*time.Second))
	e.clk.Set(t0.Add(6 * time.Second))
	res = e.claim()
	wantIDs(t, "claim at +6s", claimedIDs(res.Runs), []string{sleeper.Run.ID})
	// Next: the run available at +10s (the new lease expires at +36s).
	wantTimePtr(t, "NextDue at +6s", res.NextDue, t0.Add(10*time.Second))
}

// A claim that leases Max runs reports no next due time (its caller has no
// slot left to fill); one that leases fewer reports it, as ever.
func claimNextDueFull(t *testing.T, e *env) {
	t0 := e.clk.Now()
	e.create()
	e.create()
	e.create(withAvailableAt(t0.Add(10 * time.Second)))
	res := e.claim(claimMax(1))
	if len(res.Runs) != 1 || res.NextDue != nil {
		t.Fatalf("full claim: %d runs, NextDue %v; want 1 run and no NextDue", len(res.Runs), res.NextDue)
	}
	res = e.claim(claimMax(5))
	if len(res.Runs) != 1 {
		t.Fatalf("second claim: %d runs, want 1", len(res.Runs))
	}
	wantTimePtr(t, "NextDue of a claim with slots left", res.NextDue, t0.Add(10*time.Second))
}
