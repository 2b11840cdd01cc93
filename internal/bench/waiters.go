package bench

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/store/storepg"
)

// gate holds w7's runs in their first step until every caller waits in Result.
var gate struct {
	mu   sync.Mutex
	open chan struct{}
}

func gateOpen() <-chan struct{} {
	gate.mu.Lock()
	defer gate.mu.Unlock()
	return gate.open
}

// gated runs three no-op steps, the first of which waits for the gate.
var gated = trellis.NewWorkflow("bench-gated", func(wc *trellis.Context, _ int) (string, error) {
	var out string
	for i, name := range []string{"a", "b", "c"} {
		s, err := trellis.Step(wc, name, func(ctx context.Context) (string, error) {
			if i == 0 {
				select {
				case <-gateOpen():
				case <-ctx.Done():
					return "", ctx.Err()
				}
			}
			return payload, nil
		})
		if err != nil {
			return "", err
		}
		out = s
	}
	return out[:8], nil
})

// runW7 starts n gated runs (more than the worker's slots: the others wait in the
// store), has n callers block in Result at once, opens the gate and measures until
// every result arrived: the process's CPU per finished run and, on Postgres, the
// database's transactions per finished run.
func runW7(ctx context.Context, c *trellis.Client, n int, o Options) (*Result, error) {
	gate.mu.Lock()
	gate.open = make(chan struct{})
	gate.mu.Unlock()
	handles := make([]*trellis.Handle[string], n)
	var starts sync.WaitGroup
	var startErr atomic.Pointer[error]
	for i := range n {
		starts.Go(func() {
			h, err := trellis.Start(ctx, c, gated, i)
			if err != nil {
				startErr.CompareAndSwap(nil, &err)
			}
			handles[i] = h
		})
	}
	starts.Wait()
	if p := startErr.Load(); p != nil {
		close(gate.open)
		return nil, *p
	}
	return measureWaiters(ctx, handles, o)
}

// measureWaiters blocks a caller in Result per handle, opens the gate and waits
// for every result.
func measureWaiters(ctx context.Context, handles []*trellis.Handle[string], o Options) (*Result, error) {
	n := len(handles)
	errs := make(chan error, n)
	var entered sync.WaitGroup
	var done sync.WaitGroup
	for _, h := range handles {
		entered.Add(1)
		done.Go(func() {
			entered.Done()
			if _, err := h.Result(ctx); err != nil {
				errs <- err
			}
		})
	}
	entered.Wait()
	time.Sleep(200 * time.Millisecond) // let every caller reach its wait
	q0, qerr := dbTransactions(ctx, o.Store)
	cpu0 := processCPU()
	begin := time.Now()
	close(gate.open)
	done.Wait()
	wall := time.Since(begin)
	cpu := processCPU() - cpu0
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		return nil, err
	}
	res := &Result{
		WallS: wall.Seconds(), WorkflowsPerS: float64(n) / wall.Seconds(), StepsPerS: float64(3*n) / wall.Seconds(),
		CPUMsPerRun: perRunMs(cpu, n),
	}
	if qerr == nil && q0 >= 0 {
		time.Sleep(1500 * time.Millisecond) // Postgres publishes its counters at most once a second
		q1, err := dbTransactions(ctx, o.Store)
		if err != nil {
			return nil, err
		}
		perRun := float64(q1-q0) / float64(n)
		res.DBQueriesPerRun = &perRun
	}
	return res, nil
}

// processCPU is the process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// pgConn connects to the database of a Postgres store URL, the store's schema
// first on the search path: for the workloads that seed or inspect a store
// with SQL of their own.
func pgConn(ctx context.Context, storeURL string) (*pgx.Conn, error) {
	cfg, err := storepg.ParseURL(storeURL)
	if err != nil {
		return nil, err
	}
	cc, err := pgx.ParseConfig(cfg.URL)
	if err != nil {
		return nil, err
	}
	cc.RuntimeParams["search_path"] = pgx.Identifier{cfg.Schema}.Sanitize()
	return pgx.ConnectConfig(ctx, cc)
}

// dbTransactions returns the transactions committed and rolled back in the
// store's Postgres database (pg_stat_database, every session of the database,
// each statement outside a transaction counting as one), or -1 for another store.
func dbTransactions(ctx context.Context, storeURL string) (int64, error) {
	if !strings.HasPrefix(storeURL, "postgres") {
		return -1, nil
	}
	conn, err := pgConn(ctx, storeURL)
	if err != nil {
		return 0, fmt.Errorf("counting transactions: %w", err)
	}
	defer conn.Close(context.Background())
	var n int64
	err = conn.QueryRow(ctx, `SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = current_database()`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("counting transactions: %w", err)
	}
	return n, nil
}
