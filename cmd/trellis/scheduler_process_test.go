package main

import (
	"context"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/pgtest"
	"github.com/trellis-dev/trellis/store"
)

// mainArgsEnv makes the test binary run the trellis command line with these
// arguments (separated by newlines) instead of the tests: a real `trellis
// server` process the tests can SIGKILL and SIGSTOP.
const mainArgsEnv = "TRELLIS_TEST_MAIN_ARGS"

func TestMain(m *testing.M) {
	if args := os.Getenv(mainArgsEnv); args != "" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := run(ctx, strings.Split(args, "\n"), os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

const (
	procLease    = 2 * time.Second
	procInterval = 200 * time.Millisecond
)

// startServerProc starts a `trellis server` on the store at url, with a short
// scheduler lease, in a process of its own (startTrellisServer).
func startServerProc(t *testing.T, url string) *trellisProc {
	t.Helper()
	return startTrellisServer(t, "--store", url, "--listen", "127.0.0.1:0", "--insecure",
		"--scheduler-lease", procLease.String(), "--scheduler-interval", procInterval.String())
}

// leaderPID returns the PID of the server that holds the scheduler lease (its
// owner name is server-HOST-PID-RANDOM), asking without taking a live lease.
func leaderPID(t *testing.T, st store.Store) (int, bool) {
	t.Helper()
	l, err := st.SchedulerLeaseAcquire(context.Background(), &store.SchedulerLeaseParams{Owner: "probe", Duration: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if l.Held { // the lease had expired: the probe took it for 1ms; nobody leads
		return 0, false
	}
	parts := strings.Split(l.Owner, "-")
	if len(parts) < 2 { // an earlier probe's lease, not yet seen expired: nobody leads
		return 0, false
	}
	pid, err := strconv.Atoi(parts[len(parts)-2])
	if err != nil {
		t.Fatalf("owner %q names no PID", l.Owner)
	}
	return pid, true
}

// ticks returns the fire times of the schedule's runs, sorted; it fails on a
// tick fired twice.
func ticks(t *testing.T, st store.Store, name string) []time.Time {
	t.Helper()
	res, err := st.RunList(context.Background(), &store.RunListParams{Namespace: "default", Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[time.Time]bool{}
	var out []time.Time
	for _, r := range res.Runs {
		at, err := time.Parse("20060102T150405Z", strings.TrimPrefix(r.ID, "sched-"+name+"-"))
		if err != nil {
			t.Fatalf("run %q is no tick of %s", r.ID, name)
		}
		if seen[at] {
			t.Fatalf("tick %s started twice", at)
		}
		seen[at] = true
		out = append(out, at)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// checkContiguous fails unless every second from the first tick to the last
// has its run: none lost.
func checkContiguous(t *testing.T, ts []time.Time) {
	t.Helper()
	for i := 1; i < len(ts); i++ {
		if d := ts[i].Sub(ts[i-1]); d != time.Second {
			t.Fatalf("ticks %s and %s are %s apart: ticks were lost", ts[i-1].Format(time.TimeOnly), ts[i].Format(time.TimeOnly), d)
		}
	}
}

func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return time.Since(start)
}

// Two `trellis server` processes on one Postgres store and a per-second
// schedule: the leader is SIGKILLed, or SIGSTOPped past its lease and then
// SIGCONTed. The other takes over within the lease time (plus one interval);
// every tick of the run of the test fires, and none twice.
func TestSchedulerFailoverProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts real server processes")
	}
	t.Parallel() // a process test: beside the others (CI runs this package with -parallel 4)
	for _, mode := range []string{"SIGKILL", "SIGSTOP"} {
		t.Run(mode, func(t *testing.T) {
			// A leader frozen inside a fire holds the lease row's lock until
			// Postgres ends its idle transaction: below the 2 s lease here, as
			// the store's default (5 s) is below the default lease (10 s).
			url := pgtest.SchemaURL(t) + "&idle_in_transaction_session_timeout=1s"
			st, err := trellis.OpenStore(context.Background(), url, time.Now)
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			_, err = st.ScheduleCreate(context.Background(), &store.ScheduleCreateParams{Namespace: "default", Name: "tick",
				Spec: store.ScheduleSpec{Workflow: "w", Queue: "default", Cron: "@every 1s", TimeZone: "UTC",
					Overlap: store.OverlapAllowAll, CatchupWindow: time.Minute}})
			if err != nil {
				t.Fatal(err)
			}
			procs := map[int]*trellisProc{}
			for range 2 {
				p := startServerProc(t, url)
				procs[p.cmd.Process.Pid] = p
			}
			waitFor(t, "three ticks fire", 15*time.Second, func() bool { return len(ticks(t, st, "tick")) >= 3 })
			leader, ok := leaderPID(t, st)
			if !ok || procs[leader] == nil {
				t.Fatalf("leader %d is none of the servers %v", leader, procs)
			}
			sig := syscall.SIGKILL
			if mode == "SIGSTOP" {
				sig = syscall.SIGSTOP
			}
			procs[leader].signal(t, sig)
			before := len(ticks(t, st, "tick"))
			took := waitFor(t, "another server takes the lease", 10*time.Second, func() bool {
				pid, ok := leaderPID(t, st)
				return ok && pid != leader
			})
			if limit := procLease + procInterval + 500*time.Millisecond; took > limit {
				t.Errorf("takeover took %s, want within the lease (%s) plus an interval and slack (%s)", took, procLease, limit)
			}
			t.Logf("%s: the other server took over %s after the leader stopped", mode, took.Round(time.Millisecond))
			if mode == "SIGSTOP" {
				time.Sleep(time.Second)
				procs[leader].signal(t, syscall.SIGCONT)
			}
			waitFor(t, "ticks keep firing", 10*time.Second, func() bool { return len(ticks(t, st, "tick")) >= before+5 })
			if pid, ok := leaderPID(t, st); !ok || pid == leader {
				t.Fatalf("after %s the leader is %d (ok %v), want the other server", mode, pid, ok)
			}
			for pid, p := range procs {
				if pid == leader && mode == "SIGKILL" {
					continue
				}
				p.signal(t, syscall.SIGTERM)
				if code := p.wait(t, 30*time.Second); code != 0 {
					t.Errorf("server %d: exit status %d", pid, code)
				}
			}
			ts := ticks(t, st, "tick")
			checkContiguous(t, ts)
			t.Logf("%s: %d ticks from %s to %s, each once", mode, len(ts), ts[0].Format(time.TimeOnly), ts[len(ts)-1].Format(time.TimeOnly))
		})
	}
}
