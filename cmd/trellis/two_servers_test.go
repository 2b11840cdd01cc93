package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/pgtest"
)

// The worker processes of TestTwoServersOnePostgresProcesses: this test binary,
// re-executed, runs a remote worker of the step-log workflow until SIGTERM (a
// graceful stop) or SIGKILL.
const (
	envStepLogWorker = "TRELLIS_STEPLOG_WORKER" // the worker's name (its lease-owner name)
	envStepLogServer = "TRELLIS_STEPLOG_SERVER" // the server's URL
	envStepLogToken  = "TRELLIS_STEPLOG_TOKEN"
	envStepLogDir    = "TRELLIS_STEPLOG_DIR" // where it writes NAME.steps and NAME.log
	envStepLogStall  = "TRELLIS_STEPLOG_STALL"
	envStepLogLease  = "TRELLIS_STEPLOG_LEASE" // the worker's lease, when not stepLogLease
)

const (
	stepLogSteps = 3
	// stepLogLease is the workers' lease: long against a step (5 to 25 ms) and
	// the heartbeat (a third of it), so that a live worker keeps its runs on a
	// loaded machine; a SIGKILLed worker's runs are taken over after it.
	stepLogLease = 6 * time.Second
	// stepLogConcurrency caps each worker's runs, so that all three get some
	// and a stalled worker holds few.
	stepLogConcurrency = 8
)

// stepLogResult is a step's recorded result: the nonce of the execution that
// produced it, and the previous step's recorded nonce as that execution saw it.
type stepLogResult struct{ Nonce, Prev string }

// stepLogWorkflow runs stepLogSteps steps. Each execution of a step appends
// "S nonce run position start-unix-ns stalled" to steps before its work and
// "E nonce end-unix-ns" after it, so that the test knows when every execution
// ran and in which worker (each worker has its file). When stall says so, the
// execution's work lasts until its context ends or the process dies.
func stepLogWorkflow(steps *os.File, stall func() bool) *trellis.Workflow[int, []string] {
	return trellis.NewWorkflow("steplog", func(wc *trellis.Context, n int) ([]string, error) {
		prev, nonces := "", []string{}
		for i := range stepLogSteps {
			s, err := trellis.Step(wc, fmt.Sprintf("step-%d", i), func(ctx context.Context) (stepLogResult, error) {
				nonce, info, stalled := uuid.NewString(), trellis.StepInfo(ctx), stall()
				if _, err := fmt.Fprintf(steps, "S %s %s %d %d %t\n", nonce, info.RunID, info.Position, time.Now().UnixNano(), stalled); err != nil {
					return stepLogResult{}, err
				}
				work := time.Duration(5+rand.IntN(20)) * time.Millisecond
				if stalled {
					work = 10 * time.Minute
				}
				timer := time.NewTimer(work)
				defer timer.Stop()
				select {
				case <-timer.C:
				case <-ctx.Done():
				}
				if _, err := fmt.Fprintf(steps, "E %s %d\n", nonce, time.Now().UnixNano()); err != nil {
					return stepLogResult{}, err
				}
				if err := ctx.Err(); err != nil {
					return stepLogResult{}, err
				}
				return stepLogResult{Nonce: nonce, Prev: prev}, nil
			})
			if err != nil {
				return nil, err
			}
			prev, nonces = s.Nonce, append(nonces, s.Nonce)
		}
		return nonces, nil
	})
}

// TestStepLogWorkerProcess is a worker process of
// TestTwoServersOnePostgresProcesses. Its warnings and errors (a lease lost, a
// run abandoned) go to NAME.log as JSON. With envStepLogStall set, every step
// execution after its first two stalls.
func TestStepLogWorkerProcess(t *testing.T) {
	name := os.Getenv(envStepLogWorker)
	if name == "" {
		t.Skip("runs only as a worker process of TestTwoServersOnePostgresProcesses")
	}
	go exitWithParent()
	dir := os.Getenv(envStepLogDir)
	open := func(ext string) *os.File {
		f, err := os.OpenFile(filepath.Join(dir, name+ext), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	steps, logs := open(".steps"), open(".log")
	var executions atomic.Int64
	stall := func() bool { return os.Getenv(envStepLogStall) != "" && executions.Add(1) > 2 }
	cfg := trellis.Config{Server: os.Getenv(envStepLogServer), Token: os.Getenv(envStepLogToken),
		Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	cfg.Worker.Name = name
	cfg.Worker.LeaseDuration = stepLogLease
	if l := os.Getenv(envStepLogLease); l != "" {
		d, err := time.ParseDuration(l)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Worker.LeaseDuration = d
	}
	cfg.Worker.Concurrency = stepLogConcurrency
	cfg.Worker.ShutdownGrace = 5 * time.Second
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	w, err := trellis.NewWorker(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Register(ctx, stepLogWorkflow(steps, stall)); err != nil {
		t.Fatal(err)
	}
	if err := w.Run(ctx); err != nil { // until SIGTERM
		t.Fatal(err)
	}
}

// exitWithParent ends a helper process whose test process died without
// stopping it.
func exitWithParent() {
	parent := os.Getppid()
	for range time.Tick(time.Second) {
		if os.Getppid() != parent {
			os.Exit(1)
		}
	}
}

// stepLogWorker is a worker process; dead is when it was known to have exited.
type stepLogWorker struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	dead time.Time
}

func startStepLogWorker(t *testing.T, name, base, token, dir string, stall bool, env ...string) *stepLogWorker {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestStepLogWorkerProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envStepLogWorker+"="+name, envStepLogServer+"="+base,
		envStepLogToken+"="+token, envStepLogDir+"="+dir)
	cmd.Env = append(cmd.Env, env...)
	if stall {
		cmd.Env = append(cmd.Env, envStepLogStall+"=1")
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w := &stepLogWorker{name: name, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		w.dead = time.Now() // the process is gone: nothing of it runs after this
		close(w.done)
	}()
	t.Cleanup(func() { w.signal(syscall.SIGKILL); <-w.done })
	return w
}

func (w *stepLogWorker) signal(sig syscall.Signal) {
	select {
	case <-w.done:
	default:
		_ = w.cmd.Process.Signal(sig)
	}
}

// Two `trellis server` processes on one Postgres schema; three remote worker
// processes, two connected to the first server and one to the second; two
// clients starting runs through both servers. One worker of the first server
// stalls mid-step from its third step execution on: it holds those runs,
// heartbeating, while the others finish every other run and keep claiming,
// and for a lease duration more; then it is SIGKILLed there, and its runs are
// taken over when their leases expire.
//
// Each step execution records, outside the store, its worker, run, step and
// start and end times. Checked: every run succeeds; its history records each
// step once, with one attempt and the result of an execution that finished,
// each step having run on the previous step's recorded result; the stalled
// runs stay leased to the stalled worker while it lives, and are then claimed
// again and finished by another worker; and no two executions of one run
// overlap in time, whichever workers ran them, counting the killed worker's
// unfinished executions as lasting until it was dead. The one overlap allowed
// is after a live worker reported that it lost the run's lease (it learns so
// only at its next heartbeat or checkpoint, and fencing refuses its writes):
// its heartbeats stalled past the lease on a loaded machine. The stalled
// worker has no such excuse: it does nothing but heartbeat.
func TestTwoServersOnePostgresProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real server and worker processes")
	}
	t.Parallel() // a process test: beside the others (CI runs this package with -parallel 4)
	url := pgtest.SchemaURL(t)
	trellisCmd(t, "migrate", "--store", url).ok(t)
	token := strings.TrimSpace(trellisCmd(t, "tokens", "create", "--name", "all", "--grant", "worker:default",
		"--grant", "producer:default", "--grant", "reader:default", "--store", url).ok(t).stdout)
	srvA := startTrellisServer(t, "--store", url, "--listen", "127.0.0.1:0")
	srvB := startTrellisServer(t, "--store", url, "--listen", "127.0.0.1:0")
	dir := t.TempDir()
	victim := startStepLogWorker(t, "a-stalls", srvA.base(), token, dir, true)
	workers := []*stepLogWorker{victim,
		startStepLogWorker(t, "a-live", srvA.base(), token, dir, false),
		startStepLogWorker(t, "b-live", srvB.base(), token, dir, false)}
	var clients []*trellis.Client
	for _, srv := range []*trellisProc{srvA, srvB} {
		c, err := trellis.Open(ctxT(t), trellis.Config{Server: srv.base(), Token: token})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	waitFor(t, "three live workers", 60*time.Second, func() bool {
		ws, err := clients[1].Workers(ctxT(t))
		live := 0
		for _, w := range ws {
			if w.Live {
				live++
			}
		}
		return err == nil && live == len(workers)
	})

	stalled := make(chan struct{})
	ids := startStepLogRuns(t, clients, stalled)
	waitFor(t, "a step of "+victim.name+" to stall", 60*time.Second, func() bool {
		return hasStalled(t, filepath.Join(dir, victim.name+".steps"))
	})
	close(stalled)
	runIDs := <-ids
	if t.Failed() {
		return
	}
	// Every run but those the stalled worker holds finishes; the live workers
	// then have free slots and claim again every second. Held for a lease
	// more, the stalled runs have had their leases extended: still held.
	var held map[string]int
	for deadline := time.Now().Add(120 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var others []string
		if held, others = heldBy(t, clients[0], runIDs, victim.name); len(others) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d runs neither finished nor held by %s after 2 minutes, such as %v", len(others), victim.name, others[:min(len(others), 5)])
		}
	}
	time.Sleep(stepLogLease + time.Second) // the property under test: leases outlive this
	if now, others := heldBy(t, clients[1], runIDs, victim.name); len(others) > 0 || !maps.Equal(now, held) {
		t.Fatalf("runs held by %s (claims): %v; a lease later: %v, and %d others such as %v",
			victim.name, held, now, len(others), others[:min(len(others), 5)])
	}
	victim.signal(syscall.SIGKILL)
	<-victim.done

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	for i, id := range runIDs { // through the server that did not start it
		run, err := clients[(i+1)%2].Wait(ctx, id)
		if err != nil || run.Status != trellis.StatusSucceeded {
			// What the store says of it, and of the runs not yet ended.
			now, gerr := clients[i%2].Get(ctxT(t), id)
			still, others := heldBy(t, clients[i%2], runIDs, victim.name)
			t.Fatalf("run %s: %+v, %v; its record: %+v, %v; %d runs still leased to %s, %d others not ended, such as %v",
				id, run, err, now, gerr, len(still), victim.name, len(others), others[:min(len(others), 5)])
		}
	}
	for _, w := range workers[1:] { // a graceful stop: their last lines are written
		w.signal(syscall.SIGTERM)
	}
	for _, w := range workers[1:] {
		select {
		case <-w.done:
		case <-time.After(30 * time.Second):
			t.Errorf("worker %s did not stop within 30s of SIGTERM", w.name)
			w.signal(syscall.SIGKILL)
			<-w.done
		}
	}
	execs := readStepLogs(t, dir, workers)
	lost := readLostLeases(t, dir, workers)
	delete(lost, victim.name) // no excuse for it
	checkStepLogHistories(t, clients[0], runIDs, execs)
	checkTakeovers(t, clients[1], victim.name, held, execs)
	checkExclusive(t, execs, lost)
}

// heldBy returns the runs of ids that worker holds (leased, running), with
// how many times each was claimed, and the others that have not succeeded
// (with their status and lease owner).
func heldBy(t *testing.T, c *trellis.Client, ids []string, worker string) (held map[string]int, others []string) {
	t.Helper()
	held = map[string]int{}
	for _, id := range ids {
		run, err := c.Get(ctxT(t), id)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case run.Status == trellis.StatusRunning && run.LeaseOwner == worker:
			held[id] = run.Attempts
		case run.Status != trellis.StatusSucceeded:
			others = append(others, fmt.Sprintf("%s %s by %q", id, run.Status, run.LeaseOwner))
		}
	}
	return held, others
}

// startStepLogRuns starts runs through both clients, three goroutines each,
// until at least 120 are started and stalled is closed, and sends their run
// IDs once done. The test's end stops them.
func startStepLogRuns(t *testing.T, clients []*trellis.Client, stalled <-chan struct{}) <-chan []string {
	const minRuns, maxRuns = 120, 2000
	wf := stepLogWorkflow(nil, nil) // to start runs only: its code runs in the workers
	ctx, cancel := context.WithCancel(context.Background())
	var (
		next atomic.Int64
		mu   sync.Mutex
		ids  []string
		wg   sync.WaitGroup
	)
	t.Cleanup(func() { cancel(); wg.Wait() })
	for c := range clients {
		for range 3 {
			wg.Go(func() {
				for ctx.Err() == nil {
					i := next.Add(1) - 1
					select {
					case <-stalled:
						if i >= minRuns {
							return
						}
					default:
						if i >= maxRuns {
							return
						}
					}
					h, err := trellis.Start(ctx, clients[c], wf, int(i), trellis.StartOptions{ID: fmt.Sprint("two-", i)})
					if err != nil {
						if ctx.Err() == nil {
							t.Errorf("start %d through server %d: %v", i, c, err)
						}
						return
					}
					mu.Lock()
					ids = append(ids, h.RunID())
					mu.Unlock()
				}
			})
		}
	}
	out := make(chan []string, 1)
	go func() {
		wg.Wait()
		out <- ids
	}()
	return out
}

// hasStalled reports whether the steps file at path holds a stalled execution.
func hasStalled(t *testing.T, path string) bool {
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if f := strings.Fields(line); len(f) == 6 && f[0] == "S" && f[5] == "true" {
			return true
		}
	}
	return false
}

// stepExec is one execution of a step, as its worker recorded it; end is when
// its worker died for an execution it never finished.
type stepExec struct {
	worker, nonce, run string
	pos                int
	start, end         time.Time
	finished, stalled  bool
}

func (e *stepExec) String() string {
	return fmt.Sprintf("%s's execution of step %d from %s to %s (finished %v)", e.worker, e.pos,
		e.start.Format("15:04:05.000000"), e.end.Format("15:04:05.000000"), e.finished)
}

// readStepLogs returns the executions of every worker, by run.
func readStepLogs(t *testing.T, dir string, workers []*stepLogWorker) map[string][]*stepExec {
	t.Helper()
	byRun := map[string][]*stepExec{}
	for _, w := range workers {
		f, err := os.Open(filepath.Join(dir, w.name+".steps"))
		if err != nil {
			t.Fatal(err)
		}
		byNonce := map[string]*stepExec{}
		lines := bufio.NewScanner(f)
		for lines.Scan() {
			fs := strings.Fields(lines.Text())
			switch {
			case len(fs) == 6 && fs[0] == "S":
				pos, err1 := strconv.Atoi(fs[3])
				ns, err2 := strconv.ParseInt(fs[4], 10, 64)
				if err1 != nil || err2 != nil {
					t.Fatalf("%s: bad line %q", w.name, lines.Text())
				}
				e := &stepExec{worker: w.name, nonce: fs[1], run: fs[2], pos: pos, start: time.Unix(0, ns),
					end: w.dead, stalled: fs[5] == "true"}
				byNonce[e.nonce] = e
				byRun[e.run] = append(byRun[e.run], e)
			case len(fs) == 3 && fs[0] == "E":
				ns, err := strconv.ParseInt(fs[2], 10, 64)
				e := byNonce[fs[1]]
				if err != nil || e == nil {
					t.Fatalf("%s: bad line %q", w.name, lines.Text())
				}
				e.end, e.finished = time.Unix(0, ns), true
			default:
				t.Fatalf("%s: bad line %q", w.name, lines.Text())
			}
		}
		f.Close()
		if err := lines.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return byRun
}

// readLostLeases returns, by worker, the runs the worker logged that it lost
// (a lease found lost at a heartbeat, a run abandoned when a checkpoint was
// refused).
func readLostLeases(t *testing.T, dir string, workers []*stepLogWorker) map[string]map[string]bool {
	t.Helper()
	lost := map[string]map[string]bool{}
	for _, w := range workers {
		b, err := os.ReadFile(filepath.Join(dir, w.name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		lost[w.name] = map[string]bool{}
		for line := range strings.Lines(string(b)) {
			var rec struct {
				Msg   string `json:"msg"`
				Run   string `json:"run"`    // "lease lost"
				RunID string `json:"run_id"` // "abandoning run"
			}
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				continue // cut short by SIGKILL
			}
			t.Logf("worker %s logged: %s", w.name, strings.TrimSpace(line))
			if strings.Contains(rec.Msg, "lease lost") || strings.Contains(rec.Msg, "abandoning run") {
				lost[w.name][rec.Run+rec.RunID] = true
			}
		}
	}
	return lost
}

// checkStepLogHistories checks that each run recorded every step once, with one
// attempt (and, before it, the attempts a heartbeat reported running when the
// worker was killed or frozen past its lease, recorded lost), the result of an
// execution that finished, and the previous step's recorded result as that
// execution saw it.
func checkStepLogHistories(t *testing.T, c *trellis.Client, ids []string, execs map[string][]*stepExec) {
	t.Helper()
	for _, id := range ids {
		hist, err := c.History(ctxT(t), id)
		if err != nil {
			t.Fatal(err)
		}
		prev, steps := "", 0
		for _, op := range hist {
			if op.Kind != trellis.OpStep {
				continue
			}
			lostAttempts := 0
			for _, a := range op.AttemptLog {
				if a.Outcome == trellis.AttemptLost {
					lostAttempts++
				}
			}
			if op.Name != fmt.Sprint("step-", steps) || !op.Done || op.Attempts != 1+lostAttempts || len(op.AttemptLog) != lostAttempts {
				t.Fatalf("run %s: op %d is %s done=%v attempts=%d (log %+v), want step-%d once, done, one attempt after those lost",
					id, op.Position, op.Name, op.Done, op.Attempts, op.AttemptLog, steps)
			}
			steps++
			var r stepLogResult
			if err := json.Unmarshal(op.Result, &r); err != nil {
				t.Fatalf("run %s op %d: %v", id, op.Position, err)
			}
			var by *stepExec
			for _, e := range execs[id] {
				if e.nonce == r.Nonce && e.pos == op.Position && e.finished {
					by = e
				}
			}
			if by == nil {
				t.Fatalf("run %s step %d: recorded result %s came from no finished execution", id, op.Position, r.Nonce)
			}
			if r.Prev != prev {
				t.Fatalf("run %s step %d ran on %q but the recorded previous result is %q", id, op.Position, r.Prev, prev)
			}
			prev = r.Nonce
		}
		if steps != stepLogSteps {
			t.Fatalf("run %s recorded %d steps, want %d", id, steps, stepLogSteps)
		}
	}
}

// checkTakeovers checks that the runs the killed worker held were claimed
// again, and that those it held mid-step had that step recorded from another
// worker's execution.
func checkTakeovers(t *testing.T, c *trellis.Client, victim string, held map[string]int, execs map[string][]*stepExec) {
	t.Helper()
	midStep := 0
	for id, claims := range held {
		run, err := c.Get(ctxT(t), id)
		if err != nil {
			t.Fatal(err)
		}
		if run.Attempts <= claims || run.LeaseOwner == victim {
			t.Errorf("run %s, held by %s when it was killed (claimed %d times): now claimed %d times, by %q",
				id, victim, claims, run.Attempts, run.LeaseOwner)
		}
		for _, e := range execs[id] {
			if e.worker != victim || e.finished {
				continue
			}
			midStep++ // one per run: its steps run one after another
			redone := false
			for _, o := range execs[id] {
				redone = redone || (o.worker != victim && o.pos == e.pos && o.finished)
			}
			if !redone {
				t.Errorf("run %s: step %d, which %s was executing when killed, was not executed by another", id, e.pos, victim)
			}
		}
	}
	if midStep == 0 {
		t.Errorf("%s was killed mid-step but held no run mid-step: held %v", victim, held)
	}
	t.Logf("%d runs held by the killed worker (%d of them mid-step) were taken over", len(held), midStep)
}

// checkExclusive checks that no two executions of one run overlap in time,
// unless the earlier one's worker logged that it lost the run.
func checkExclusive(t *testing.T, execs map[string][]*stepExec, lost map[string]map[string]bool) {
	t.Helper()
	total, allowed := 0, 0
	perWorker := map[string]int{}
	for id, es := range execs {
		for i, e := range es {
			total++
			perWorker[e.worker]++
			for _, o := range es[:i] {
				if !e.start.Before(o.end) || !o.start.Before(e.end) {
					continue // one ended before the other began
				}
				first := o
				if e.start.Before(o.start) {
					first = e
				}
				if lost[first.worker][id] {
					allowed++
					t.Logf("run %s: %s overlaps %s; %s had lost the run's lease", id, o, e, first.worker)
					continue
				}
				t.Errorf("run %s executed by two at once: %s overlaps %s", id, o, e)
			}
		}
	}
	t.Logf("%d step executions of %d runs checked for overlaps (by worker: %v); %d overlaps after a reported lost lease",
		total, len(execs), perWorker, allowed)
}
