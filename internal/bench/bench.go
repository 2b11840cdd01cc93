// Package bench measures Trellis end to end through the public API: start runs,
// execute steps in the embedded worker, wait for results. Each workload prints one
// JSON line (see Result).
package bench

import (
	"context"
	"fmt"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/sqlitedrv"
	"github.com/trellis-dev/trellis/store"
)

// Result is one workload's measurement; its JSON form is a contract of
// `trellis bench --json`.
type Result struct {
	Workload      string         `json:"workload"`
	N             int            `json:"n"`
	WallS         float64        `json:"wall_s"`
	WorkflowsPerS float64        `json:"workflows_per_s"`
	StepsPerS     float64        `json:"steps_per_s"`
	P50Ms         float64        `json:"p50_ms"`
	P99Ms         float64        `json:"p99_ms"`
	Settings      map[string]any `json:"settings"`
	// RSSIdleMB and RSSWaitingMB (w4) are the process's resident set after a GC,
	// before the first start and once every run waits.
	RSSIdleMB    *float64 `json:"rss_idle_mb,omitempty"`
	RSSWaitingMB *float64 `json:"rss_waiting_mb,omitempty"`
	// CPUMsPerRun (w1, w5, w7) is the process's CPU time (user+system,
	// getrusage) per run over the measured span: w1's from the first start to
	// the last result, w5's work phase (a Postgres server's CPU is not in it),
	// w7's from the gate's opening to the last result. It varies less than the
	// throughput on a machine whose speed does.
	CPUMsPerRun *float64 `json:"cpu_ms_per_run,omitempty"`
	// ServerCPUMsPerRun (w1 through a server) is the server process's CPU
	// per run over the same span, from its GET /metrics
	// (process_cpu_seconds_total, 10 ms steps); absent when the token may
	// not read them. CPUMsPerRun is then the bench process's: the client and
	// its remote worker.
	ServerCPUMsPerRun *float64 `json:"server_cpu_ms_per_run,omitempty"`
	// DBQueriesPerRun (w7, Postgres) is the database's transactions per finished
	// run over the same span: pg_stat_database's xact_commit+xact_rollback, which
	// counts every session of the database (each statement outside a transaction
	// is one).
	DBQueriesPerRun *float64 `json:"db_queries_per_run,omitempty"`
	// WALBytesPerRun and StatementsPerRun (w1, w2, w3 on Postgres) are the
	// WAL the server wrote per run over the workload (pg_current_wal_lsn
	// before and after: the whole cluster's WAL) and the statements the
	// database executed per run: pg_stat_statements' calls in the store's
	// database when the extension is installed there and loaded, else its
	// transactions (pg_stat_database.xact_commit+xact_rollback, a lower bound:
	// a transaction of many statements counts once); Settings
	// ["statements_counted"] says which. Both count every session, so a
	// database and cluster nobody else uses give the workload's own.
	WALBytesPerRun   *float64 `json:"wal_bytes_per_run,omitempty"`
	StatementsPerRun *float64 `json:"statements_per_run,omitempty"`
	// Subscribers (s2, s3) is the number of SSE subscribers; EventsPerS (s2)
	// the events they were delivered per second, all of them counted;
	// RSSPerSubscriberKB (s3) the server's resident set growth per idle stream.
	Subscribers        int      `json:"subscribers,omitempty"`
	EventsPerS         *float64 `json:"events_per_s,omitempty"`
	RSSPerSubscriberKB *float64 `json:"rss_per_subscriber_kb,omitempty"`
	// InsertPerS (w5) is how many jobs per second StartMany inserted, in
	// batches of 1,000, before any worker served them.
	InsertPerS *float64 `json:"insert_per_s,omitempty"`
	// r1: BaselinePerS is w1's median rate without the purger (WorkflowsPerS
	// is with it), Ratio their quotient, Purged the expired runs deleted
	// during the purging rounds, PurgePerS their rate, SeedS the time the
	// bulk insert of the expired runs took, Rounds every measurement.
	BaselinePerS *float64             `json:"baseline_workflows_per_s,omitempty"`
	Ratio        *float64             `json:"ratio,omitempty"`
	Purged       *int64               `json:"purged,omitempty"`
	PurgePerS    *float64             `json:"purge_per_s,omitempty"`
	SeedS        *float64             `json:"seed_s,omitempty"`
	Rounds       map[string][]float64 `json:"rounds,omitempty"`
}

// Options configure a benchmark run.
type Options struct {
	Store       string
	Concurrency int
	// Clients bounds w1: at most Clients runs started and awaited at once,
	// each from a goroutine of its own (0: all n at once). The DBOS harness
	// bounds its w1 so (-conc), which scripts/ratios.py passes as Clients.
	Clients int
	// Observe turns metrics and tracing on: a trellis.Metrics, and a tracer
	// provider sampling every span into a batch processor whose exporter drops
	// them (the cost of the spans, not of a collector).
	Observe bool
	// TraceRatio is the share of traces sampled with Observe (parent-based);
	// 0 or 1: every trace.
	TraceRatio float64
	// Subscribers is the SSE subscribers of s2 and s3 (0: their default).
	Subscribers int
	// ClaimBatch is the worker's claim batch; 0: the workload's (its
	// claimBatch, else the worker's default).
	ClaimBatch int
}

// Workload runs one named workload with n runs (0: its default).
type Workload struct {
	Name        string
	DefaultN    int
	Description string
	run         func(ctx context.Context, c *trellis.Client, n int) (*Result, error)
	// runWith, when set instead of run, also gets the options (the store URL).
	runWith func(ctx context.Context, c *trellis.Client, n int, o Options) (*Result, error)
	// alone, when set instead, opens what it needs itself (the stream
	// workloads start a server; r1 its own store and clients).
	alone func(ctx context.Context, n int, o Options) (*Result, error)
	// claimBatch is the workload's default claim batch (0: the worker's).
	claimBatch int
}

// Workloads lists every workload, in order.
var Workloads = []Workload{
	{"w1", 2000, "start N workflows concurrently (at most --clients at once, else all), each 3 sequential no-op steps; wall time first start to last result", nil, runW1With, nil, 0},
	{"w2", 20, "one 20-step sequential workflow, N times; per-step latency", runW2, nil, nil, 0},
	{"w3", 200, "N sequential start→result of a 1-step workflow; latency", runW3, nil, nil, 0},
	{"w4", 10000, "start N workflows that each sleep an hour; time until all wait, RSS before and after", runW4, nil, nil, 0},
	{"w5", 20000, "insert N one-step jobs with StartMany in batches of 1,000, then work them all; jobs worked per second and insert_per_s (claim batch 1,000 unless --claim-batch)", runW5, nil, nil, w5Batch},
	{"w6", 1000, "N runs each waiting for an event; send the N events; send to next step latency", runW6, nil, nil, 0},
	{"w7", 10000, "many waiters: N gated 3-step runs (more than the slots), N callers blocked in Result; open the gate; CPU and DB queries per finished run", nil, runW7, nil, 0},
	{"w8", 1_000_000, "growth: fill the store with finished 3-step runs to N/100, N/10 and N; at each size w1 (2,000 runs), a claim, the run list's first and middle page, runs get (p50, p99) and the store's bytes per run (--plot draws them)", nil, nil, runW8, 0},
	{"r1", 1000000, "seed N expired runs (3 ops each) with bulk SQL; w1 (10,000 runs) without purging, then while the purger deletes them, 3 rounds; purge rate and the w1 ratio", nil, nil, runR1, 0},
	{"ui1", 1_000_000, "the web UI's runs page with N runs stored (SQLite or Postgres, seeded with bulk SQL once) of a server in process; page load latency over HTTP, as with --server", nil, nil, runUI1, 0},
	{"s1", 500, "s1 of --server on a server in process: one run emits N events ~2ms apart; Emit to SSE client latency", nil, nil, onLocalServer("s1"), 0},
	{"s2", 200, "s2 of --server on a server in process: N events to --subscribers SSE subscribers (default 1000); events delivered per second, each checked", nil, nil, onLocalServer("s2"), 0},
	{"s3", 0, "s3 of --server on a `trellis server` child process: --subscribers idle SSE streams (default 10000); its RSS growth per stream", nil, nil, runS3, 0},
}

// Find returns the workload named name.
func Find(name string) (Workload, bool) {
	for _, w := range Workloads {
		if w.Name == name {
			return w, true
		}
	}
	return Workload{}, false
}

// Run runs the workload (on a client of its own, opened on o.Store, unless it
// opens what it needs itself) and returns its result.
func Run(ctx context.Context, w Workload, n int, o Options) (*Result, error) {
	if n <= 0 {
		n = w.DefaultN
	}
	if o.ClaimBatch == 0 {
		o.ClaimBatch = w.claimBatch
	}
	var (
		res *Result
		err error
	)
	if w.alone != nil {
		res, err = w.alone(ctx, n, o)
	} else {
		res, err = runOn(ctx, w, n, o)
	}
	if err != nil {
		return nil, fmt.Errorf("workload %s: %w", w.Name, err)
	}
	res.Workload, res.N = w.Name, n
	extra := res.Settings // what the workload measured besides the fixed fields
	res.Settings = settings(o)
	for k, v := range extra {
		res.Settings[k] = v
	}
	if o.Observe {
		res.Settings["observe"] = "metrics+tracing"
		if o.TraceRatio > 0 && o.TraceRatio < 1 {
			res.Settings["trace_ratio"] = o.TraceRatio
		}
	}
	return res, nil
}

// runOn runs a workload on a client of its own, opened on o.Store.
func runOn(ctx context.Context, w Workload, n int, o Options) (*Result, error) {
	cfg := benchConfig(o, nil)
	if o.Observe {
		sampler := sdktrace.AlwaysSample()
		if o.TraceRatio > 0 && o.TraceRatio < 1 {
			sampler = sdktrace.ParentBased(sdktrace.TraceIDRatioBased(o.TraceRatio))
		}
		tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(discardExporter{}), sdktrace.WithSampler(sampler))
		defer func() { _ = tp.Shutdown(context.WithoutCancel(ctx)) }()
		cfg.Metrics, cfg.TracerProvider = trellis.NewMetrics(), tp
	}
	c, err := trellis.Open(ctx, cfg)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.Register(ctx, benchWorkflows...); err != nil {
		return nil, err
	}
	run := func() (*Result, error) {
		if w.runWith != nil {
			return w.runWith(ctx, c, n, o)
		}
		return w.run(ctx, c, n)
	}
	if !dbPerRun[w.Name] {
		return run()
	}
	pc, err := openPGCounters(ctx, o.Store)
	if err != nil {
		return nil, err
	}
	if pc == nil { // not Postgres
		return run()
	}
	defer pc.close()
	before, err := pc.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	res, err := run()
	if err != nil {
		return nil, err
	}
	after, err := pc.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	if err := pc.perRun(ctx, res, before, after, n); err != nil {
		return nil, err
	}
	return res, nil
}

// benchConfig is the configuration of a benchmark's client: namespace
// "bench", the options' worker settings, no background purge of expired runs
// (it would run at random points of the measurements). With backend set, the
// client uses it instead of opening o.Store.
func benchConfig(o Options, backend store.Store) trellis.Config {
	cfg := trellis.Config{Store: o.Store, Namespace: "bench", Backend: backend}
	if backend != nil {
		cfg.Store = ""
	}
	cfg.Worker.Concurrency = o.Concurrency
	cfg.Worker.ClaimBatch = o.ClaimBatch
	cfg.Worker.RetentionInterval = -1
	return cfg
}

// discardExporter drops the spans it is given.
type discardExporter struct{}

func (discardExporter) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discardExporter) Shutdown(context.Context) error                             { return nil }

func settings(o Options) map[string]any {
	durability := "fsync"
	if strings.Contains(o.Store, "durability=relaxed") {
		durability = "relaxed"
	}
	driver, _, _ := strings.Cut(o.Store, ":")
	m := map[string]any{
		"store": driver, "durability": durability, "concurrency": o.Concurrency, "claim_batch": o.ClaimBatch,
		"gomaxprocs": runtime.GOMAXPROCS(0), "go": runtime.Version(),
	}
	if o.Clients > 0 {
		m["clients"] = o.Clients
	}
	if driver == "sqlite" {
		m["sqlite_library"] = sqlitedrv.Library // the build's: modernc.org/sqlite, or mattn/go-sqlite3 with -tags trellis_cgo
	}
	return m
}

// runThreeSteps is w1's workflow body (steps a, b and c, each returning
// payload), shared by the workloads that run it under other names.
func runThreeSteps(wc *trellis.Context) (string, error) {
	var out string
	for _, name := range []string{"a", "b", "c"} {
		s, err := trellis.Step(wc, name, noop)
		if err != nil {
			return "", err
		}
		out = s
	}
	return out[:8], nil
}

// payload is the ~100-byte string every benchmark step returns.
var payload = strings.Repeat("trellis-", 12) + "bench"

var (
	threeSteps = trellis.NewWorkflow("bench-3-steps", func(wc *trellis.Context, _ int) (string, error) {
		return runThreeSteps(wc)
	})
	oneStep = trellis.NewWorkflow("bench-1-step", func(wc *trellis.Context, _ int) (string, error) {
		s, err := trellis.Step(wc, "a", noop)
		if err != nil {
			return "", err
		}
		return s[:8], nil
	})
	benchWorkflows = []trellis.Registrable{threeSteps, oneStep, twentySteps, sleeper, eventWaiter, gated, emitter}
)

func noop(context.Context) (string, error) { return payload, nil }

// stepTimes records, per w2 run, when each step started.
var stepTimes sync.Map // workflow ID -> *timeLog

var twentySteps = trellis.NewWorkflow("bench-20-steps", func(wc *trellis.Context, _ int) (int, error) {
	v, _ := stepTimes.Load(wc.WorkflowID())
	times, _ := v.(*timeLog)
	for i := range 20 {
		if _, err := trellis.Step(wc, fmt.Sprintf("s%02d", i), func(context.Context) (string, error) {
			if times != nil {
				times.add(time.Now())
			}
			return payload, nil
		}); err != nil {
			return 0, err
		}
	}
	return 20, nil
})

type timeLog struct {
	mu sync.Mutex
	t  []time.Time
}

func (l *timeLog) add(t time.Time) {
	l.mu.Lock()
	l.t = append(l.t, t)
	l.mu.Unlock()
}

// percentile returns the p-th percentile (0..100) of d in milliseconds.
func percentile(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p / 100)
	return float64(s[i]) / float64(time.Millisecond)
}
