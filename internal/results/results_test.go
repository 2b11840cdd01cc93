package results_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/trellis-dev/trellis/internal/results"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ns = "results-test"

// setup opens a SQLite store and a started watcher on it; path is the database.
func setup(t *testing.T, poll time.Duration) (*storesqlite.Store, *results.Watcher, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trellis.db")
	st := open(t, path)
	w := watch(t, results.Config{Store: st, Namespace: ns, PollInterval: poll})
	return st, w, path
}

// countedSetup is setup with a store that counts the watcher's reads.
func countedSetup(t *testing.T, poll time.Duration) (*countingStore, *results.Watcher, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "trellis.db")
	st := &countingStore{Store: open(t, path)}
	w := watch(t, results.Config{Store: st, Namespace: ns, PollInterval: poll})
	return st, w, path
}

// watch makes and starts a watcher of cfg, stopped at cleanup (before its
// store closes: that cleanup was registered first).
func watch(t *testing.T, cfg results.Config) *results.Watcher {
	t.Helper()
	w, err := results.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	t.Cleanup(w.Stop)
	return w
}

func open(t *testing.T, path string) *storesqlite.Store {
	t.Helper()
	st, err := storesqlite.Open(context.Background(), storesqlite.Config{Path: path, Durability: storesqlite.DurabilityRelaxed})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// start creates a run already claimed.
func start(t *testing.T, st store.Store, id string) *store.ClaimedRun {
	t.Helper()
	res, err := st.RunCreate(context.Background(), &store.RunCreateParams{Namespace: ns, ID: id, WorkflowID: id,
		Workflow: "wf", Queue: "default", Claim: &store.CreateClaim{Worker: "w", LeaseDuration: time.Hour}})
	if err != nil || res.Claimed == nil {
		t.Fatalf("RunCreate(%s) = %+v, %v", id, res, err)
	}
	return res.Claimed
}

// finish ends a run with status.
func finish(t *testing.T, st store.Store, cr *store.ClaimedRun, status store.Status) {
	t.Helper()
	p := &store.CheckpointParams{Lease: store.Lease{Namespace: ns, RunID: cr.Run.ID, Token: cr.LeaseToken}, Status: status}
	if status == store.StatusSucceeded {
		p.Output = []byte(`"out-` + cr.Run.ID + `"`)
	} else {
		p.Error = &store.ErrorInfo{Message: "boom"}
	}
	if _, err := st.Checkpoint(context.Background(), p); err != nil {
		t.Fatalf("Checkpoint(%s): %v", cr.Run.ID, err)
	}
}

// waitAsync waits for runID on its own goroutine; the result arrives on the channel.
func waitAsync(ctx context.Context, w *results.Watcher, runID string) <-chan error {
	errc := make(chan error, 1)
	go func() {
		r, err := w.Wait(ctx, runID)
		if err == nil && (r.ID != runID || !r.Status.Terminal()) {
			err = fmt.Errorf("Wait(%s) = run %s %s", runID, r.ID, r.Status)
		}
		errc <- err
	}()
	return errc
}

// waitRegistered waits until n runs have callers waiting.
func waitRegistered(t *testing.T, w *results.Watcher, n int) {
	t.Helper()
	for w.Waiting() != n {
		time.Sleep(time.Millisecond) // polls a counter; no outcome depends on timing
	}
}

func TestWaitersGetTheirRunsOutcome(t *testing.T) {
	t.Parallel()
	st, w, _ := setup(t, time.Hour) // no poll: the feed alone must deliver
	ctx := context.Background()
	done := start(t, st, "ended-before")
	finish(t, st, done, store.StatusSucceeded)
	if r, err := w.Wait(ctx, "ended-before"); err != nil || string(r.Output) != `"out-ended-before"` {
		t.Fatalf("Wait(ended before) = %+v, %v", r, err)
	}
	const n = 200
	runs := make([]*store.ClaimedRun, n)
	errs := make([]<-chan error, 0, 2*n)
	for i := range runs {
		runs[i] = start(t, st, fmt.Sprintf("run-%d", i))
		errs = append(errs, waitAsync(ctx, w, runs[i].Run.ID), waitAsync(ctx, w, runs[i].Run.ID))
	}
	waitRegistered(t, w, n)
	for i, cr := range runs {
		finish(t, st, cr, []store.Status{store.StatusSucceeded, store.StatusFailed}[i%2])
	}
	for _, e := range errs {
		if err := <-e; err != nil {
			t.Fatal(err)
		}
	}
	if got := w.Waiting(); got != 0 {
		t.Fatalf("Waiting() = %d after every outcome", got)
	}
}

func TestWaitUnknownRunCancelAndStop(t *testing.T) {
	t.Parallel()
	st, w, _ := setup(t, time.Hour)
	ctx := context.Background()
	if _, err := w.Wait(ctx, "missing"); !errors.Is(err, store.ErrRunNotFound) {
		t.Fatalf("Wait(missing) = %v, want ErrRunNotFound", err)
	}
	start(t, st, "open")
	cctx, cancel := context.WithCancel(ctx)
	errc := waitAsync(cctx, w, "open")
	waitRegistered(t, w, 1)
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait with cancelled ctx = %v", err)
	}
	if got := w.Waiting(); got != 0 {
		t.Fatalf("Waiting() = %d after the caller left", got)
	}
	errc = waitAsync(ctx, w, "open")
	waitRegistered(t, w, 1)
	w.Stop()
	if err := <-errc; !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Wait across Stop = %v, want ErrClosed", err)
	}
	if _, err := w.Wait(ctx, "open"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Wait after Stop = %v, want ErrClosed", err)
	}
}

// Another process's commits reach a SQLite watcher by its poll: one batched read
// per interval.
func TestWaitSeesOtherProcessBySQLitePoll(t *testing.T) {
	t.Parallel()
	_, w, path := setup(t, 10*time.Millisecond)
	other := open(t, path)
	ctx := context.Background()
	const n = 20
	errs := make([]<-chan error, n)
	runs := make([]*store.ClaimedRun, n)
	for i := range runs {
		runs[i] = start(t, other, fmt.Sprintf("elsewhere-%d", i))
		errs[i] = waitAsync(ctx, w, runs[i].Run.ID)
	}
	waitRegistered(t, w, n)
	for _, cr := range runs {
		finish(t, other, cr, store.StatusSucceeded)
	}
	for _, e := range errs {
		if err := <-e; err != nil {
			t.Fatal(err)
		}
	}
}

// A run executing in this process gets its outcome from Ended; a change the feed
// reports meanwhile is not read, and an end without outcome makes it read again.
func TestEndedDeliversLocalOutcomes(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "trellis.db")
	st := open(t, path)
	w := watch(t, results.Config{Store: st, Namespace: ns, PollInterval: time.Hour,
		Executing: func(string) bool { return true }})
	ctx := context.Background()
	a, b := start(t, st, "a"), start(t, st, "b")
	errA, errB := make(chan *store.Run, 1), waitAsync(ctx, w, "b")
	go func() { r, _ := w.Wait(ctx, "a"); errA <- r }()
	waitRegistered(t, w, 2)
	finish(t, st, b, store.StatusSucceeded)
	// a never ends in the store: only Ended can deliver it.
	final := *a.Run
	final.Status, final.Output = store.StatusSucceeded, []byte(`"from the engine"`)
	w.Ended("a", &final)
	if r := <-errA; r == nil || string(r.Output) != `"from the engine"` {
		t.Fatalf("Wait(a) = %+v, want the engine's outcome", r)
	}
	w.Ended("b", nil)
	if err := <-errB; err != nil {
		t.Fatal(err)
	}
}

// A run whose end will be reported to Ended (Config.Local) is not read when a
// caller registers for it; Ended delivers it. Another run is read as its
// caller registers, and one that stopped being local before its caller
// registered (it ended: Ended was called with nobody waiting) is read then.
func TestLocalRunsAreNotReadAsTheyRegister(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "trellis.db")
	st := &countingStore{Store: open(t, path)}
	var local sync.Map  // run ID -> true while its end will come to Ended
	var ending sync.Map // run ID -> true while its end is written here (as a server's Executing)
	// The runs are created before the watcher: the feed's report of a create
	// could otherwise reach it after a's caller registered, and a changed run
	// that is waited for and not ending here is read.
	a, b, c := start(t, st, "a"), start(t, st, "b"), start(t, st, "c")
	w := watch(t, results.Config{Store: st, Namespace: ns, PollInterval: time.Hour,
		Local:     func(id string) bool { _, ok := local.Load(id); return ok },
		Executing: func(id string) bool { _, ok := ending.Load(id); return ok }})
	ctx := context.Background()
	local.Store("a", true)
	local.Store("c", true)
	gotA := make(chan *store.Run, 1)
	go func() { r, _ := w.Wait(ctx, "a"); gotA <- r }()
	errB := waitAsync(ctx, w, "b")
	waitRegistered(t, w, 2)
	for st.reads.Load() < 1 { // b's, as it registered
		time.Sleep(time.Millisecond)
	}
	ending.Store("a", true)
	finish(t, st, a, store.StatusSucceeded)
	local.Delete("a") // committed, then no longer local, then Ended
	final := *a.Run
	final.Status, final.Output = store.StatusSucceeded, []byte(`"handed over"`)
	w.Ended("a", &final)
	ending.Delete("a")
	if r := <-gotA; r == nil || string(r.Output) != `"handed over"` {
		t.Fatalf("Wait(a) = %+v, want the run handed to Ended", r)
	}
	finish(t, st, b, store.StatusSucceeded)
	if err := <-errB; err != nil {
		t.Fatal(err)
	}
	// c ends here while nobody waits: its end is dropped, and a caller
	// registering afterwards reads it.
	finish(t, st, c, store.StatusSucceeded)
	local.Delete("c")
	w.Ended("c", nil)
	before := st.reads.Load()
	if r, err := w.Wait(ctx, "c"); err != nil || r.Status != store.StatusSucceeded {
		t.Fatalf("Wait(c) = %+v, %v", r, err)
	}
	if n := st.reads.Load() - before; n != 1 {
		t.Fatalf("%d reads for a caller of a run no longer local, want 1", n)
	}
	// a was never read: its caller registered while it was local, and the
	// feed's report of its end came while it was ending here, or after
	// (nobody waiting).
	if n := st.readsOf("a"); n != 0 {
		t.Fatalf("a was read %d times, want none", n)
	}
}

// createPending creates a pending run with RunsCreate, which publishes no
// report of the run (a batch start's create).
func createPending(t *testing.T, st store.Store, id string) {
	t.Helper()
	res, err := st.RunsCreate(context.Background(), &store.RunsCreateParams{Namespace: ns, Runs: []*store.RunCreateParams{
		{ID: id, WorkflowID: id, Workflow: "wf", Queue: "default"}}})
	if err != nil || !res.Items[0].Created {
		t.Fatalf("RunsCreate(%s) = %+v, %v", id, res, err)
	}
}

// claim claims the pending runs and returns them by ID.
func claim(t *testing.T, st store.Store) map[string]*store.ClaimedRun {
	t.Helper()
	res, err := st.RunsClaim(context.Background(), &store.RunsClaimParams{Namespace: ns, Workflows: []string{"wf"},
		Worker: "w", Max: 10, LeaseDuration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]*store.ClaimedRun{}
	for _, cr := range res.Runs {
		m[cr.Run.ID] = cr
	}
	return m
}

// A run this process created (Created, with the Mark from before its create)
// is not read when a caller registers for it while unchanged: the feed's
// report of its end delivers it. One that ended before its caller registered
// is delivered too: the feed's report came while nobody waited (remembered),
// or comes after. So is one another process ended (the SQLite poll), and
// every run after a check that re-read everything.
func TestCreatedRunsAreNotReadAsTheyRegister(t *testing.T) {
	t.Parallel()
	st, w, _ := countedSetup(t, time.Hour) // no poll: the feed alone
	ctx := context.Background()

	mark := w.Mark()
	createPending(t, st, "quiet")
	createPending(t, st, "early")
	w.Created([]string{"quiet", "early"}, mark)
	claimed := claim(t, st)

	// quiet: waited for, unchanged, then ended here.
	errQuiet := waitAsync(ctx, w, "quiet")
	waitRegistered(t, w, 1)
	finish(t, st, claimed["quiet"], store.StatusSucceeded)
	if err := <-errQuiet; err != nil {
		t.Fatal(err)
	}
	if n := st.readsOf("quiet"); n != 1 {
		t.Fatalf("quiet was read %d times, want once: when the feed reported its end", n)
	}

	// early: ended here before anyone waited.
	m := w.Mark()
	finish(t, st, claimed["early"], store.StatusSucceeded)
	for w.Mark() == m { // the feed's report of its end makes a check (nobody waits: remembered)
		time.Sleep(time.Millisecond)
	}
	if r, err := w.Wait(ctx, "early"); err != nil || r.Status != store.StatusSucceeded {
		t.Fatalf("Wait(early) = %+v, %v", r, err)
	}
}

// A created run another process ends before its caller registers (a commit
// this SQLite feed does not carry) reaches its caller through the poll.
func TestCreatedRunEndedElsewhere(t *testing.T) {
	t.Parallel()
	st, w, path := setup(t, 5*time.Millisecond)
	mark := w.Mark()
	createPending(t, st, "foreign")
	w.Created([]string{"foreign"}, mark)
	other := open(t, path)
	finish(t, other, claim(t, other)["foreign"], store.StatusSucceeded)
	if r, err := w.Wait(context.Background(), "foreign"); err != nil || r.Status != store.StatusSucceeded {
		t.Fatalf("Wait(foreign) = %+v, %v", r, err)
	}
}

// A created run whose report the watcher may have dropped (it emptied what it
// remembers, or re-read everything since the mark) is read as it registers.
func TestCreatedRunsReadAfterARereadOfEverything(t *testing.T) {
	t.Parallel()
	st, w, path := countedSetup(t, 5*time.Millisecond)
	ctx := context.Background()
	mark := w.Mark()
	createPending(t, st, "run")
	w.Created([]string{"run"}, mark)
	// Another process commits while a caller waits for another run: a poll
	// re-reads every waited-for run (a check of all, after the mark).
	createPending(t, st, "held")
	errHeld := waitAsync(ctx, w, "held")
	waitRegistered(t, w, 1)
	before := st.reads.Load()
	createPending(t, open(t, path), "elsewhere")
	for st.reads.Load() == before {
		time.Sleep(time.Millisecond)
	}
	errRun := waitAsync(ctx, w, "run")
	waitRegistered(t, w, 2)
	for st.readsOf("run") == 0 {
		time.Sleep(time.Millisecond) // read as it registered; the test times out otherwise
	}
	claimed := claim(t, st)
	finish(t, st, claimed["held"], store.StatusSucceeded)
	finish(t, st, claimed["run"], store.StatusSucceeded)
	for _, errc := range []<-chan error{errHeld, errRun} {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

// countingStore counts the reads of waited-for runs, and of the store's
// foreign-commit mark.
type countingStore struct {
	*storesqlite.Store
	reads atomic.Int64
	ids   sync.Map // run ID -> *atomic.Int64: the reads naming it
	marks atomic.Int64
}

func (c *countingStore) ForeignCommitMark(ctx context.Context) (int64, error) {
	c.marks.Add(1)
	return c.Store.ForeignCommitMark(ctx)
}

// polls waits until the watcher has asked for the store's mark n more times
// (n polls; they come every 5 ms in these tests).
func (c *countingStore) polls(t *testing.T, n int64) {
	t.Helper()
	want := c.marks.Load() + n
	for deadline := time.Now().Add(5 * time.Second); c.marks.Load() < want; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d polls read the store's mark in 5 s, want %d", n-(want-c.marks.Load()), n)
		}
	}
}

func (c *countingStore) RunsGet(ctx context.Context, p *store.RunsGetParams) ([]*store.Run, error) {
	c.reads.Add(1)
	for _, id := range p.IDs {
		n, _ := c.ids.LoadOrStore(id, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
	}
	return c.Store.RunsGet(ctx, p)
}

func (c *countingStore) readsOf(id string) int64 {
	if n, ok := c.ids.Load(id); ok {
		return n.(*atomic.Int64).Load()
	}
	return 0
}

// A SQLite watcher's poll re-reads the waited-for runs only when a commit that
// its feed does not carry may have happened: its own store's writes do not make
// it read again, another process's do. The first poll with a caller is no
// exception: the watcher took the store's mark as it started, and its polls
// kept it current while nobody waited.
func TestSQLitePollReadsAfterForeignCommitsOnly(t *testing.T) {
	t.Parallel()
	st, w, path := countedSetup(t, 5*time.Millisecond)
	ctx := context.Background()
	time.Sleep(20 * time.Millisecond) // polls while nobody waits
	waited := start(t, st, "waited")
	errc := waitAsync(ctx, w, "waited")
	waitRegistered(t, w, 1)
	for st.reads.Load() < 1 { // its read as it registered
		time.Sleep(time.Millisecond)
	}
	for i := range 20 { // this store's own commits, and polls between them
		finish(t, st, start(t, st, fmt.Sprintf("local-%d", i)), store.StatusSucceeded)
		time.Sleep(5 * time.Millisecond)
	}
	if got := st.reads.Load(); got != 1 {
		t.Fatalf("%d reads of the waited-for run with no foreign commit, want 1 (as it registered)", got)
	}
	finish(t, open(t, path), waited, store.StatusSucceeded) // another process, as far as st can tell
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// A poll while nobody waits keeps the store's mark current: a commit of
// another process made then does not make the first poll with a caller re-read
// the caller's run (a burst of callers after a quiet spell would all be read
// again), and the poll's check of everything makes the runs created before it
// read as their callers register (TestCreatedRunEndedElsewhere).
func TestSQLitePollKeepsTheMarkWhileNobodyWaits(t *testing.T) {
	t.Parallel()
	st, w, path := countedSetup(t, 5*time.Millisecond)
	ctx := context.Background()
	waited := start(t, st, "waited")
	createPending(t, open(t, path), "elsewhere") // another process commits while nobody waits
	time.Sleep(150 * time.Millisecond)           // past the store's reuse of a mark reading (100 ms)
	st.polls(t, 2)                               // polls with nobody waiting: they read the mark
	errc := waitAsync(ctx, w, "waited")
	waitRegistered(t, w, 1)
	for st.readsOf("waited") < 1 { // its read as it registered
		time.Sleep(time.Millisecond)
	}
	st.polls(t, 3) // polls with a caller
	if n := st.readsOf("waited"); n != 1 {
		t.Fatalf("the waited-for run was read %d times, want once (as it registered): the mark was not kept current while nobody waited", n)
	}
	finish(t, st, waited, store.StatusSucceeded)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestWaitEach waits for many runs on one channel: each is reported once, as it
// ends or is found missing; a wait whose ctx ends first reports what ended by
// then and leaves no caller registered.
func TestWaitEach(t *testing.T) {
	t.Parallel()
	st, w, _ := setup(t, time.Hour) // no poll: the feed alone must deliver
	ctx := context.Background()
	ended := start(t, st, "each-ended")
	finish(t, st, ended, store.StatusSucceeded)
	open := []*store.ClaimedRun{start(t, st, "each-a"), start(t, st, "each-b")}
	type report struct {
		id, status string
	}
	reports := make(chan report, 10)
	idles := 0
	errc := make(chan error, 1)
	go func() {
		errc <- w.WaitEach(ctx, []string{"each-a", "each-ended", "each-missing", "each-b"}, func(id string, run *store.Run) {
			r := report{id: id, status: "missing"}
			if run != nil {
				r.status = string(run.Status)
				if run.ID != id {
					r.status = "wrong run " + run.ID
				}
			}
			reports <- r
		}, func() { idles++ })
	}()
	want := map[report]bool{{"each-ended", "succeeded"}: true, {"each-missing", "missing"}: true}
	for range 2 {
		if r := <-reports; !want[r] {
			t.Fatalf("first reports: got %+v, want %v", r, want)
		}
	}
	finish(t, st, open[1], store.StatusFailed)
	if r := <-reports; r != (report{"each-b", "failed"}) {
		t.Fatalf("after b ended: %+v", r)
	}
	finish(t, st, open[0], store.StatusSucceeded)
	if r := <-reports; r != (report{"each-a", "succeeded"}) {
		t.Fatalf("after a ended: %+v", r)
	}
	if err := <-errc; err != nil || idles == 0 {
		t.Fatalf("WaitEach = %v with %d idle calls", err, idles)
	}

	start(t, st, "each-open")
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err := w.WaitEach(cctx, []string{"each-open", "each-a"}, func(id string, run *store.Run) { reports <- report{id: id} }, func() {})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitEach past its ctx = %v", err)
	}
	if r := <-reports; r.id != "each-a" || len(reports) != 0 {
		t.Fatalf("reports %+v and %d more, want each-a alone", r, len(reports))
	}
	if got := w.Waiting(); got != 0 {
		t.Fatalf("Waiting() = %d after WaitEach returned", got)
	}
}

// failingStore fails the reads of run once armed.
type failingStore struct {
	*storesqlite.Store
	run   string
	armed atomic.Bool
}

func (f *failingStore) RunsGet(ctx context.Context, p *store.RunsGetParams) ([]*store.Run, error) {
	if f.armed.Load() && slices.Contains(p.IDs, f.run) {
		return nil, errors.New("disk on fire")
	}
	return f.Store.RunsGet(ctx, p)
}

// WaitEach returns the error of a failed read even when it is the outcome of
// the last run it waited for (it returned nil, as if every run had been
// reported, and runs:wait answered "done" instead of an error).
func TestWaitEachLastReadFails(t *testing.T) {
	t.Parallel()
	st := &failingStore{Store: open(t, filepath.Join(t.TempDir(), "trellis.db")), run: "last-b"}
	w := watch(t, results.Config{Store: st, Namespace: ns, PollInterval: time.Hour})
	a, b := start(t, st, "last-a"), start(t, st, "last-b")
	finish(t, st, a, store.StatusSucceeded)
	var reported []string
	errc := make(chan error, 1)
	firstIdle := make(chan struct{}, 1)
	go func() {
		errc <- w.WaitEach(t.Context(), []string{"last-a", "last-b"}, func(id string, _ *store.Run) {
			reported = append(reported, id)
		}, func() {
			select {
			case firstIdle <- struct{}{}:
			default:
			}
		})
	}()
	<-firstIdle // last-a reported, last-b read and waited for
	st.armed.Store(true)
	finish(t, st, b, store.StatusSucceeded)
	if err := <-errc; err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("WaitEach = %v, want the failed read's error", err)
	}
	if !slices.Equal(reported, []string{"last-a"}) {
		t.Fatalf("reported %q, want last-a only", reported)
	}
}
