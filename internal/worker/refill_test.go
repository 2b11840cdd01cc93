package worker

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/trellis-dev/trellis/store"
)

// claims is a real store that logs how many runs each claim asked for and got.
type claims struct {
	store.Store
	mu  sync.Mutex
	log [][2]int // {Max, claimed}
}

func (s *claims) RunsClaim(ctx context.Context, p *store.RunsClaimParams) (*store.RunsClaimResult, error) {
	res, err := s.Store.RunsClaim(ctx, p)
	if err == nil {
		s.mu.Lock()
		s.log = append(s.log, [2]int{p.Max, len(res.Runs)})
		s.mu.Unlock()
	}
	return res, err
}

func (s *claims) calls() [][2]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// holder executes a run by announcing it and holding it until released.
type holder struct {
	started chan string
	release chan struct{}
}

func (h holder) Execute(ctx context.Context, cr *store.ClaimedRun, _ *Control) {
	h.started <- cr.Run.ID
	select {
	case <-h.release:
	case <-ctx.Done():
	}
}

// With a backlog, runs finishing one by one are refilled a quarter of a claim
// batch at a time: one claim per refillAt finishes, each taking that many runs.
func TestBacklogRefillsInBatches(t *testing.T) {
	t.Parallel()
	f := setup(t)
	st := &claims{Store: f.st}
	w, h := backlogWorker(t, f, st)
	if w.refillAt() != 2 {
		t.Fatalf("refillAt = %d, want 2", w.refillAt())
	}
	w.Start()
	defer stop(t, w)
	waitN(t, h.started, 8)
	for range 3 {
		h.release <- struct{}{} // one free slot: no claim yet
		h.release <- struct{}{}
		waitN(t, h.started, 2)
	}
	want := [][2]int{{8, 8}, {2, 2}, {2, 2}, {2, 2}}
	if got := st.calls(); !slices.Equal(got, want) {
		t.Fatalf("claims {asked, got} = %v, want %v", got, want)
	}
}

// backlogWorker makes 40 pending runs of workflow "a" and a worker of 8 slots and
// a claim batch of 8 (refillAt 2) on st, executing with a holder; not started.
func backlogWorker(t *testing.T, f *fixture, st Store) (*Worker, holder) {
	t.Helper()
	for i := range 40 {
		f.createRun(fmt.Sprintf("r-%02d", i), "a")
	}
	h := holder{started: make(chan string, 64), release: make(chan struct{})}
	w, err := New(Config{Store: st, Namespace: "ns", Queues: []string{"q"}, Workflows: func() []string { return []string{"a"} },
		Name: "w-1", Concurrency: 8, ClaimBatch: 8, LeaseDuration: time.Hour, PollInterval: time.Hour,
		ShutdownGrace: time.Millisecond}, h)
	if err != nil {
		t.Fatal(err)
	}
	return w, h
}

func waitN(t *testing.T, started <-chan string, n int) {
	t.Helper()
	for range n {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("run not claimed")
		}
	}
}

// Runs started while every slot is taken by direct dispatch go to the store
// pending; the first slot that frees claims one at once, not at the next poll
// (an hour here).
func TestPendingWhileFullClaimedWhenSlotFrees(t *testing.T) {
	t.Parallel()
	f := setup(t)
	h := holder{started: make(chan string, 8), release: make(chan struct{})}
	st := &claims{Store: f.st}
	w := twoSlots(t, st, h)
	w.Start()
	defer stop(t, w)
	// The first claim (at start) finds nothing; then two direct dispatches fill
	// both slots, and two more runs wait in the store. The runs are created once
	// that claim has returned: one still on its way could lease r-2 after r-0
	// and r-1 took both slots, and r-2 would then wait in the worker for a slot
	// (TestClaimBeyondFreeSlotsWaitsForSlots), not in the store.
	for deadline := time.Now().Add(10 * time.Second); len(st.calls()) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the worker made no first claim")
		}
	}
	for i := range 4 {
		dispatch(t, f, w, fmt.Sprintf("r-%d", i))
	}
	waitN(t, h.started, 2)
	h.release <- struct{}{}
	select {
	case id := <-h.started:
		if id != "r-2" {
			t.Fatalf("claimed %s, want r-2 (the oldest pending run)", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a freed slot did not claim the pending run")
	}
	h.release <- struct{}{}
	waitN(t, h.started, 1)
}

// twoSlots makes a worker w-1 of workflow "a" with two slots on st, executing
// with exec; it claims up to 8 runs at once, and polls or heartbeats only hourly.
func twoSlots(t *testing.T, st Store, exec Executor) *Worker {
	t.Helper()
	w, err := New(Config{Store: st, Namespace: "ns", Queues: []string{"q"}, Workflows: func() []string { return []string{"a"} },
		Name: "w-1", Concurrency: 2, ClaimBatch: 8, LeaseDuration: time.Hour, PollInterval: time.Hour,
		ShutdownGrace: time.Millisecond}, exec)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// dispatch starts run id of workflow "a" as a process that embeds worker w (named
// w-1) does: created already claimed by w when it has a free slot (direct
// dispatch), else pending. It reports whether the run was dispatched.
func dispatch(t *testing.T, f *fixture, w *Worker, id string) bool {
	t.Helper()
	p := &store.RunCreateParams{Namespace: "ns", ID: id, WorkflowID: id, Workflow: "a", Queue: "q"}
	reserved := w.Reserve()
	if reserved {
		p.Claim = &store.CreateClaim{Worker: "w-1", LeaseDuration: time.Hour}
	}
	res, err := f.st.RunCreate(t.Context(), p)
	if err != nil {
		if reserved {
			w.Unreserve()
		}
		t.Fatal(err)
	}
	if reserved {
		w.Launch(res.Claimed)
	}
	return reserved
}

// gatedClaims is a real store whose first claim, once asked for, waits for the
// test to open gate; it reports each claim's Max as it starts and its runs as
// it returns.
type gatedClaims struct {
	store.Store
	asked, got chan int
	gate       chan struct{}
}

func (s *gatedClaims) RunsClaim(ctx context.Context, p *store.RunsClaimParams) (*store.RunsClaimResult, error) {
	select {
	case s.asked <- p.Max:
	default:
	}
	select {
	case <-s.gate:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	res, err := s.Store.RunsClaim(ctx, p)
	if err == nil {
		select {
		case s.got <- len(res.Runs):
		default:
		}
	}
	return res, err
}

// counting is a holder that also counts the runs executing at once.
type counting struct {
	holder
	mu       sync.Mutex
	now, max int
}

func (c *counting) Execute(ctx context.Context, cr *store.ClaimedRun, ctl *Control) {
	c.mu.Lock()
	c.now++
	c.max = max(c.max, c.now)
	c.mu.Unlock()
	c.holder.Execute(ctx, cr, ctl)
	c.mu.Lock()
	c.now--
	c.mu.Unlock()
}

func (c *counting) counts() (now, most int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now, c.max
}

// slotRace makes a worker of two slots on a store holding two pending runs
// (p-0, p-1) whose first claim, asked for both slots, is held until direct
// dispatches of d-0 and d-1 fill them; then it lets the claim return both
// pending runs. Four runs leased, two slots.
func slotRace(t *testing.T) (*fixture, *Worker, *counting) {
	t.Helper()
	f := setup(t)
	f.createRun("p-0", "a")
	f.createRun("p-1", "a")
	st := &gatedClaims{Store: f.st, asked: make(chan int, 8), got: make(chan int, 8), gate: make(chan struct{})}
	ex := &counting{holder: holder{started: make(chan string, 8), release: make(chan struct{})}}
	w := twoSlots(t, st, ex)
	w.Start()
	if asked := recv(t, st.asked, "the first claim"); asked != 2 {
		t.Fatalf("the first claim asked for %d runs, want 2", asked)
	}
	for _, id := range []string{"d-0", "d-1"} {
		if !dispatch(t, f, w, id) {
			t.Fatalf("%s was not dispatched: the slots are free", id)
		}
	}
	waitN(t, ex.started, 2)
	close(st.gate)
	if got := recv(t, st.got, "the first claim's return"); got != 2 {
		t.Fatalf("the first claim leased %d runs, want 2", got)
	}
	for deadline := time.Now().Add(10 * time.Second); w.Executing() != 4; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Executing() = %d, want 4 leases (2 executing, 2 waiting)", w.Executing())
		}
	}
	return f, w, ex
}

func recv[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("waited 10s for %s", what)
		panic("unreachable")
	}
}

// A claim that returns more runs than the slots direct dispatches left it
// executes no more than Concurrency at once: the others stay leased and start
// in claim order as slots free up.
func TestClaimBeyondFreeSlotsWaitsForSlots(t *testing.T) {
	t.Parallel()
	f, w, ex := slotRace(t)
	defer stop(t, w)
	if now, _ := ex.counts(); now != 2 {
		t.Fatalf("%d runs executing, want 2 (Concurrency)", now)
	}
	for _, id := range []string{"p-0", "p-1"} {
		r, err := f.st.RunGet(t.Context(), &store.RunGetParams{Namespace: "ns", Ref: id})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != store.StatusRunning || r.LeaseOwner != "w-1" {
			t.Fatalf("%s is %s leased by %q, want running, leased by w-1", id, r.Status, r.LeaseOwner)
		}
	}
	for _, want := range []string{"p-0", "p-1"} {
		ex.release <- struct{}{}
		if id := recv(t, ex.started, "a waiting run to start"); id != want {
			t.Fatalf("started %s, want %s (claim order)", id, want)
		}
	}
	ex.release <- struct{}{}
	ex.release <- struct{}{}
	for deadline := time.Now().Add(10 * time.Second); w.Executing() != 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("Executing() = %d after every run returned", w.Executing())
		}
	}
	if _, most := ex.counts(); most != 2 {
		t.Fatalf("%d runs executed at once, want at most Concurrency (2)", most)
	}
}

// Stop with runs waiting for a slot starts each of them on a done context (an
// executor hands such a run back) and returns: none is left behind.
func TestStopStartsRunsWaitingForSlots(t *testing.T) {
	t.Parallel()
	_, w, ex := slotRace(t)
	stop(t, w)
	waitN(t, ex.started, 2)
	if now, most := ex.counts(); now != 0 || most != 2 {
		t.Fatalf("after Stop: %d executing, at most %d at once; want 0 and 2", now, most)
	}
}

// cancelDuringClaim is a real store whose claims cancel the runs they claim
// before returning them, and wait until the worker has handled the
// cancellation's signal: the signal comes while the runs are not yet held.
type cancelDuringClaim struct {
	store.Store
	w *Worker
}

func (s *cancelDuringClaim) RunsClaim(ctx context.Context, p *store.RunsClaimParams) (*store.RunsClaimResult, error) {
	res, err := s.Store.RunsClaim(ctx, p)
	if err != nil || len(res.Runs) == 0 {
		return res, err
	}
	gen := s.w.cancelGen.Load()
	for _, cr := range res.Runs {
		if _, err := s.Store.RunCancel(ctx, &store.RunCancelParams{Namespace: cr.Run.Namespace, Ref: cr.Run.ID}); err != nil {
			return nil, err
		}
	}
	for s.w.cancelGen.Load() == gen { // the heartbeat loop took the signal
		time.Sleep(time.Millisecond)
	}
	return res, nil
}

// canceller executes a run until its cancellation is known, and says so.
type canceller struct{ cancelled chan string }

func (c canceller) Execute(ctx context.Context, cr *store.ClaimedRun, ctl *Control) {
	select {
	case <-ctl.CancelRequested():
		c.cancelled <- cr.Run.ID
	case <-ctx.Done():
	}
}

// A cancellation signalled while the run was being claimed reaches it at once,
// not at the next heartbeat (an hour here).
func TestCancelDuringClaim(t *testing.T) {
	t.Parallel()
	f := setup(t)
	st := &cancelDuringClaim{Store: f.st}
	ex := canceller{cancelled: make(chan string, 1)}
	w, err := New(Config{Store: st, Namespace: "ns", Queues: []string{"q"}, Workflows: func() []string { return []string{"a"} },
		Name: "w-1", Concurrency: 2, ClaimBatch: 8, LeaseDuration: 2 * time.Hour, HeartbeatInterval: time.Hour,
		PollInterval: time.Hour, ShutdownGrace: time.Millisecond}, ex)
	if err != nil {
		t.Fatal(err)
	}
	st.w = w
	f.createRun("r-1", "a")
	w.Start()
	defer stop(t, w)
	select {
	case id := <-ex.cancelled:
		if id != "r-1" {
			t.Fatalf("cancelled %s", id)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the cancellation signalled during the claim did not reach the run")
	}
}

// A step whose name is longer than the lease call accepts is reported cut,
// never refused: a refused heartbeat would lose every lease of the worker.
func TestStepStartedKeepsHeartbeatValid(t *testing.T) {
	c := NewControl(store.Lease{Namespace: "ns", RunID: "r", Token: 1})
	long := strings.Repeat("é", store.MaxNameLen) // 2 bytes each
	c.StepStarted(long, 0, 0, time.Now(), 0)
	p := &store.LeasesExtendParams{Duration: time.Minute, Leases: []store.Lease{c.Lease}, Steps: []store.RunStep{c.Step()}}
	if err := p.Validate(); err != nil {
		t.Fatalf("the step reported for a long name: %v", err)
	}
	if s := c.Step(); !utf8.ValidString(s.Name) || s.Attempt != 1 {
		t.Fatalf("reported %q attempt %d", s.Name, s.Attempt)
	}
}

// Of parallel step attempts, the heartbeat reports the one whose deadline comes
// first (those without a timeout last, the oldest first), and the next one
// once it ends.
func TestStepReportedEarliestDeadline(t *testing.T) {
	c := NewControl(store.Lease{Namespace: "ns", RunID: "r", Token: 1})
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	want := func(name string) {
		t.Helper()
		if got := c.Step().Name; got != name {
			t.Fatalf("reported step = %q, want %q", got, name)
		}
	}
	a := c.StepStarted("a", 1, 1, t0, 0)
	want("a")
	b := c.StepStarted("b", 2, 1, t0.Add(time.Second), 0) // no timeout, younger
	want("a")
	d := c.StepStarted("d", 3, 2, t0.Add(2*time.Second), time.Minute)
	want("d")
	e := c.StepStarted("e", 4, 1, t0.Add(3*time.Second), time.Second) // deadline t0+4s, before d's
	want("e")
	if s := c.Step(); s.Position != 4 || s.Timeout != time.Second || s.Attempt != 1 {
		t.Fatalf("reported %+v, want position 4 and its timeout", s)
	}
	c.StepEnded(e)
	want("d")
	c.StepEnded(a) // not the one reported: no change
	want("d")
	c.StepEnded(d)
	want("b")
	c.StepEnded(b)
	want("")
	c.StepEnded(b) // twice: a no-op
	want("")
}

// pushClaims serves claim streams from a real store, as a server would: a
// stream claims once and delivers what it got; a full one ends when hold lets it
// (the runs of a slot freed meanwhile find the stream still open), one that got
// less than its credit stays open until it is ended.
type pushClaims struct {
	*claims
	hold chan struct{}
}

func (s pushClaims) ClaimPush(ctx context.Context, p *store.RunsClaimParams, _ time.Duration, deliver func(*store.ClaimedRun)) (bool, error) {
	res, err := s.RunsClaim(ctx, p)
	if err != nil {
		return false, err
	}
	for _, cr := range res.Runs {
		deliver(cr)
	}
	if len(res.Runs) == p.Max {
		select {
		case <-s.hold:
		case <-ctx.Done():
		}
	} else {
		<-ctx.Done()
	}
	return false, nil
}

// With a backlog, a push worker opens its next claim stream once refillAt slots
// are free, not one stream per slot that was free when the last stream ended:
// the same batches as the poll loop.
func TestPushBacklogRefillsInBatches(t *testing.T) {
	t.Parallel()
	f := setup(t)
	st := pushClaims{&claims{Store: f.st}, make(chan struct{})}
	w, h := backlogWorker(t, f, st)
	w.Start()
	defer stop(t, w)
	waitN(t, h.started, 8)
	for range 3 {
		h.release <- struct{}{} // a slot frees while the full stream is still open
		st.hold <- struct{}{}   // the stream ends: one free slot, no stream yet
		h.release <- struct{}{}
		waitN(t, h.started, 2)
	}
	want := [][2]int{{8, 8}, {2, 2}, {2, 2}, {2, 2}}
	if got := st.calls(); !slices.Equal(got, want) {
		t.Fatalf("claim streams {credit, got} = %v, want %v", got, want)
	}
}
