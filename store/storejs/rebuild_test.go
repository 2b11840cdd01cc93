package storejs_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/sqlitedrv"
	"github.com/trellis-dev/trellis/store/storejs"
)

// workload runs a mix of what the engine writes — steps with retries, run
// store values, stream events, sleeps, events, child runs, jobs,
// cancellations, queues — until every run ended or ctx ends.
func workload(ctx context.Context, t testing.TB, dir string, runs int, started func(int)) {
	workloadOn(ctx, t, storejs.Config{Dir: dir}, runs, started)
}

// workloadOn is workload on a store of cfg.
func workloadOn(ctx context.Context, t testing.TB, cfg storejs.Config, runs int, started func(int)) {
	s, err := storejs.Open(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for !s.Leading() {
		time.Sleep(5 * time.Millisecond)
	}
	db, err := trellis.Open(ctx, trellis.Config{Backend: storejs.View(s)})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	child := trellis.NewWorkflow("child", func(wc *trellis.Context, n int) (int, error) {
		return trellis.Step(wc, "double", func(context.Context) (int, error) { return 2 * n, nil })
	})
	var flaky atomic.Int64
	mix := trellis.NewWorkflow("mix", func(wc *trellis.Context, n int) (string, error) {
		a, err := trellis.Step(wc, "flaky", func(context.Context) (int, error) {
			if flaky.Add(1)%3 == 1 {
				return 0, errors.New("transient")
			}
			return n, nil
		}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 5, Backoff: trellis.Fixed(time.Millisecond)}})
		if err != nil {
			return "", err
		}
		if err := wc.Set("stage", fmt.Sprint("flaky done ", a)); err != nil {
			return "", err
		}
		if err := trellis.Emit(wc, "progress", a); err != nil {
			return "", err
		}
		if err := wc.Sleep(5 * time.Millisecond); err != nil {
			return "", err
		}
		ev, err := trellis.WaitEvent[string](wc, "go", 200*time.Millisecond)
		if err != nil && !errors.Is(err, trellis.ErrEventTimeout) {
			return "", err
		}
		c, err := trellis.Child(wc, child, n)
		if err != nil {
			return "", err
		}
		return fmt.Sprintf("%d %d %s %s", a, c, ev, wc.UUID()), nil
	})
	job := trellis.NewJob("job", func(ctx context.Context, n int) (int, error) { return n + 1, nil })
	if err := db.Register(ctx, child, mix, job); err != nil {
		t.Fatal(err)
	}
	if _, err := db.CreateQueue(ctx, "slow", trellis.QueueSettings{ConcurrencyLimit: ptr(2)}); err != nil {
		t.Fatal(err)
	}
	var hs []*trellis.Handle[string]
	for i := range runs {
		h, err := trellis.Start(ctx, db, mix, i, trellis.StartOptions{ID: fmt.Sprint("mix-", i)})
		if err != nil {
			t.Fatal(err)
		}
		hs = append(hs, h)
		if started != nil {
			started(i)
		}
		if _, err := trellis.StartJob(ctx, db, job, i, trellis.StartOptions{ID: fmt.Sprint("job-", i), Queue: "slow"}); err != nil {
			t.Fatal(err)
		}
		if i%3 == 0 {
			if err := db.SendEvent(ctx, h.RunID(), "go", "went"); err != nil {
				t.Fatal(err)
			}
		}
		if i%7 == 6 {
			if err := db.Cancel(ctx, h.RunID()); err != nil && !errors.Is(err, trellis.ErrRunFinished) {
				t.Fatal(err)
			}
		}
	}
	for _, h := range hs {
		if _, err := h.Result(ctx); err != nil && !errors.Is(err, trellis.ErrCancelled) {
			var re *trellis.RunError
			if !errors.As(err, &re) {
				t.Fatal(err)
			}
		}
	}
}

// dump reads every table of a replica but schema_migrations (each replica
// migrates itself, at its own time), rows in primary-key order.
func dump(t *testing.T, path string) map[string][]string {
	t.Helper()
	db, err := sqlitedrv.Open("file:" + path + "?_pragma=query_only(1)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'table' AND name <> 'schema_migrations'`)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for rows.Next() {
		var n string
		rows.Scan(&n)
		tables = append(tables, n)
	}
	rows.Close()
	out := map[string][]string{}
	for _, tb := range tables {
		rows, err := db.Query(`SELECT * FROM "` + tb + `"`)
		if err != nil {
			t.Fatal(err)
		}
		cols, _ := rows.Columns()
		for rows.Next() {
			vals := make([]any, len(cols))
			ptrs := make([]any, len(cols))
			for i := range vals {
				ptrs[i] = &vals[i]
			}
			if err := rows.Scan(ptrs...); err != nil {
				t.Fatal(err)
			}
			out[tb] = append(out[tb], fmt.Sprintf("%q", vals))
		}
		rows.Close()
		sort.Strings(out[tb])
	}
	return out
}

func compareDumps(t *testing.T, want, got map[string][]string) {
	t.Helper()
	if len(want) != len(got) {
		t.Errorf("tables: %d, want %d", len(got), len(want))
	}
	rows := 0
	for tb, w := range want {
		rows += len(w)
		if !reflect.DeepEqual(w, got[tb]) {
			t.Errorf("table %s differs after the rebuild: %d rows, want %d", tb, len(got[tb]), len(w))
			for i := range min(len(w), len(got[tb])) {
				if w[i] != got[tb][i] {
					t.Errorf("first difference:\n got %s\nwant %s", got[tb][i], w[i])
					break
				}
			}
		}
	}
	t.Logf("%d rows in %d tables equal", rows, len(want))
	if rows < 100 {
		t.Errorf("only %d rows compared: the workload wrote too little to prove anything", rows)
	}
}

func rebuild(t *testing.T, dir string) map[string][]string {
	t.Helper()
	for _, suffix := range []string{"", "-wal", "-shm"} {
		os.Remove(filepath.Join(dir, "replica.db"+suffix))
	}
	s, err := storejs.Open(context.Background(), storejs.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	return dump(t, filepath.Join(dir, "replica.db"))
}

func TestRebuiltReplicaEqualsTheWriters(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	workload(ctx, t, dir, 40, nil)
	before := dump(t, filepath.Join(dir, "replica.db"))
	compareDumps(t, before, rebuild(t, dir))
}

// TestRebuildAfterKillInTheMiddleOfABatch kills a process running the
// workload with SIGKILL, then reopens its store (the replica catches up
// with the log) and rebuilds it from scratch: both equal.
func TestRebuildAfterKillInTheMiddleOfABatch(t *testing.T) {
	if dir := os.Getenv("STOREJS_WORKLOAD_DIR"); dir != "" {
		workload(context.Background(), t, dir, 2000, func(i int) {
			if i == 300 {
				fmt.Println("started 300")
			}
		})
		return
	}
	if testing.Short() {
		t.Skip("starts a process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRebuildAfterKillInTheMiddleOfABatch$")
	cmd.Env = append(os.Environ(), "STOREJS_WORKLOAD_DIR="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill it in full flight: 300 runs started, the rest being started while
	// the first ones run.
	sc := bufio.NewScanner(stdout)
	for sc.Scan() && sc.Text() != "started 300" {
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	s, err := storejs.Open(context.Background(), storejs.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	after := dump(t, filepath.Join(dir, "replica.db"))
	compareDumps(t, after, rebuild(t, dir))
}

func ptr[T any](v T) *T { return &v }
