package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/sqlitedrv"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// GrowthPoint is what w8 measured at one store size. Its JSON form is part of
// w8's line (settings.points) of `trellis bench --json`.
type GrowthPoint struct {
	// Runs is the runs in the store when the point was measured: the finished
	// runs of the fill and of the earlier points' w1 and claims.
	Runs int `json:"runs"`
	// FillS is the time the fill from the previous size took, FillPerS its
	// rate (runs finished per second).
	FillS    float64 `json:"fill_s"`
	FillPerS float64 `json:"fill_per_s"`
	// W1PerS is w1's rate (W1N runs) at this size.
	W1PerS float64 `json:"w1_workflows_per_s"`
	W1N    int     `json:"w1_n"`
	// Claim: one store claim (Max 1) of a ready run among the finished ones.
	ClaimP50Ms float64 `json:"claim_p50_ms"`
	ClaimP99Ms float64 `json:"claim_p99_ms"`
	// ListFirst: the first page of the run list (100 runs, no filter),
	// through the client's List, which the HTTP list route calls;
	// ListDeep: the page at position ListDeepAt (the middle of the list),
	// continued from a cursor.
	ListFirstP50Ms float64 `json:"list_first_p50_ms"`
	ListFirstP99Ms float64 `json:"list_first_p99_ms"`
	ListDeepP50Ms  float64 `json:"list_deep_p50_ms"`
	ListDeepP99Ms  float64 `json:"list_deep_p99_ms"`
	ListDeepAt     int     `json:"list_deep_at"`
	// Get: `runs get` of a random finished run by its ID (the client's Get).
	GetP50Ms float64 `json:"get_p50_ms"`
	GetP99Ms float64 `json:"get_p99_ms"`
	// StoreBytes is the store's size, indexes included: on SQLite the pages
	// in use (page_count - freelist_count, times page_size), which counts the
	// pages still in the WAL; on Postgres pg_total_relation_size of every
	// table of the store's schema (heap, indexes, TOAST, free space map).
	// FileBytes (SQLite) is the database file and its WAL on disk.
	// BytesPerRun is StoreBytes / Runs.
	StoreBytes  int64   `json:"store_bytes"`
	FileBytes   int64   `json:"file_bytes,omitempty"`
	BytesPerRun float64 `json:"bytes_per_run"`
}

// GrowthProgress, when set, receives a line per point of w8 as it is
// measured ("w8 point: " and its JSON), so that a long measurement stopped
// part way keeps its smaller sizes.
var GrowthProgress io.Writer

// growthConfig is one w8 measurement's shape.
type growthConfig struct {
	Sizes   []int // store sizes to measure at, ascending
	W1N     int   // runs of each w1
	Samples int   // timed requests of each list and get measure
	Claims  int   // timed claims
}

// growthConfigFor is w8's configuration for --n n: the sizes n/100, n/10
// and n (10^4, 10^5 and 10^6 by default).
func growthConfigFor(n int) growthConfig {
	g := growthConfig{W1N: min(2000, max(10, n/100)), Samples: 400, Claims: min(200, max(10, n/100))}
	for _, s := range []int{n / 100, n / 10, n} {
		if s > 0 && (len(g.Sizes) == 0 || s > g.Sizes[len(g.Sizes)-1]) {
			g.Sizes = append(g.Sizes, s)
		}
	}
	return g
}

func runW8(ctx context.Context, n int, o Options) (*Result, error) {
	return runGrowth(ctx, o, growthConfigFor(n))
}

// growthWorkflowName is the workflow of w8's fill: three steps returning
// payload, as w1's.
const growthWorkflowName = "bench-growth-3-steps"

// growthClaimWorkflow and growthClaimQueue are the runs w8 claims itself: no
// worker serves them.
const (
	growthClaimWorkflow = "bench-growth-claim"
	growthClaimQueue    = "bench-growth-claim"
)

// runGrowth fills the store (namespace bench) with finished three-step runs
// up to each size of g in turn, through the engine (batches of StartMany,
// worked by the embedded worker), and measures at each size: the store's
// bytes per run, the run list's first page and a page in its middle, `runs
// get`, a claim, and w1. Postgres tables are analyzed after each fill, as
// autovacuum would have.
func runGrowth(ctx context.Context, o Options, g growthConfig) (*Result, error) {
	st, err := trellis.OpenStore(ctx, o.Store, time.Now)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	var done atomic.Int64
	wf := trellis.NewWorkflow(growthWorkflowName, func(wc *trellis.Context, _ int) (string, error) {
		out, err := runThreeSteps(wc)
		if err == nil {
			done.Add(1)
		}
		return out, err
	})
	c, err := trellis.Open(ctx, benchConfig(o, st))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.Register(ctx, append(benchWorkflows, wf)...); err != nil {
		return nil, err
	}
	began := time.Now()
	var (
		points  []GrowthPoint
		sample  []string // IDs of some filled runs, for `runs get`
		started int64
	)
	for _, size := range g.Sizes {
		have, err := countRuns(ctx, o.Store)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		if size > have {
			if err := growthFill(ctx, c, size-have, &started, &done, &sample); err != nil {
				return nil, fmt.Errorf("filling to %d runs: %w", size, err)
			}
		}
		fill := time.Since(t0)
		if err := analyzePostgres(ctx, o.Store); err != nil {
			return nil, err
		}
		p := GrowthPoint{FillS: fill.Seconds(), W1N: g.W1N}
		if size > have {
			p.FillPerS = float64(size-have) / fill.Seconds()
		}
		if p.Runs, err = countRuns(ctx, o.Store); err != nil {
			return nil, err
		}
		if p.StoreBytes, p.FileBytes, err = storeBytes(ctx, o.Store); err != nil {
			return nil, fmt.Errorf("measuring the store's size: %w", err)
		}
		p.BytesPerRun = float64(p.StoreBytes) / float64(p.Runs)
		if err := growthList(ctx, c, g.Samples, p.Runs, &p, &sample); err != nil {
			return nil, fmt.Errorf("list: %w", err)
		}
		if err := growthGet(ctx, c, g.Samples, sample, &p); err != nil {
			return nil, fmt.Errorf("get: %w", err)
		}
		if err := growthClaim(ctx, st, g.Claims, size, &p); err != nil {
			return nil, fmt.Errorf("claim: %w", err)
		}
		w1, err := runW1(ctx, c, g.W1N)
		if err != nil {
			return nil, fmt.Errorf("w1: %w", err)
		}
		p.W1PerS = w1.WorkflowsPerS
		points = append(points, p)
		if GrowthProgress != nil {
			b, _ := json.Marshal(p)
			fmt.Fprintf(GrowthProgress, "w8 point: %s\n", b)
		}
	}
	last := points[len(points)-1]
	return &Result{
		WallS: time.Since(began).Seconds(), WorkflowsPerS: last.W1PerS, StepsPerS: 3 * last.W1PerS,
		P50Ms: last.ListFirstP50Ms, P99Ms: last.ListFirstP99Ms,
		Settings: map[string]any{"points": points, "sizes": g.Sizes, "w1_n": g.W1N, "samples": g.Samples, "claims": g.Claims,
			"p50_p99_of": "the run list's first page at the largest size"},
	}, nil
}

// countRuns counts the runs of namespace bench in the store, with SQL.
func countRuns(ctx context.Context, url string) (int, error) {
	var n int
	switch {
	case strings.HasPrefix(url, "sqlite:"):
		cfg, err := storesqlite.ParseURL(url)
		if err != nil {
			return 0, err
		}
		db, err := sqlitedrv.Open(cfg.Path + "?_pragma=busy_timeout(10000)")
		if err != nil {
			return 0, err
		}
		defer db.Close()
		err = db.QueryRowContext(ctx, `SELECT count(*) FROM runs WHERE namespace = 'bench'`).Scan(&n)
		return n, err
	case strings.HasPrefix(url, "postgres"):
		conn, err := pgConn(ctx, url)
		if err != nil {
			return 0, err
		}
		defer conn.Close(context.Background())
		err = conn.QueryRow(ctx, `SELECT count(*) FROM runs WHERE namespace = 'bench'`).Scan(&n)
		return n, err
	}
	return 0, fmt.Errorf("w8: unsupported store %q", url)
}

// growthFill starts n runs of growthWorkflowName in StartMany batches and
// waits until every one has finished, keeping at most growthInFlight
// unfinished at a time so that the runs are worked as they are started.
func growthFill(ctx context.Context, c *trellis.Client, n int, started *int64, done *atomic.Int64, sample *[]string) error {
	const growthInFlight = 8192
	reqs := make([]trellis.StartRequest, 0, trellis.MaxStartMany)
	target := *started + int64(n)
	for *started < target {
		for *started-done.Load() > growthInFlight-trellis.MaxStartMany {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(2 * time.Millisecond):
			}
		}
		reqs = reqs[:0]
		for range min(int64(trellis.MaxStartMany), target-*started) {
			reqs = append(reqs, trellis.StartRequest{Workflow: growthWorkflowName, Input: strconv.AppendInt(nil, *started+int64(len(reqs)), 10)})
		}
		res, err := c.StartMany(ctx, reqs)
		if err != nil {
			return err
		}
		for i, r := range res {
			if !r.Created {
				return fmt.Errorf("a run was not created: %v", r.Error)
			}
			if (*started+int64(i))%10 == 0 {
				*sample = append(*sample, r.Run.ID)
			}
		}
		*started += int64(len(reqs))
	}
	for done.Load() < target {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	// The workflow counted its run before the run's end was written: wait
	// until none is left unfinished in the store.
	unfinished := []trellis.Status{trellis.StatusPending, trellis.StatusRunning, trellis.StatusWaiting}
	for {
		page, err := c.List(ctx, trellis.ListOptions{Workflow: growthWorkflowName, Statuses: unfinished, Limit: 1})
		if err != nil {
			return err
		}
		if len(page.Runs) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// growthList times the first page of the run list and the page at the
// middle of it (reached by walking pages of 1,000 once), samples times each.
// The IDs of some runs it walked over join sample (a store filled by an
// earlier w8 has no runs of this one's fill).
func growthList(ctx context.Context, c *trellis.Client, samples, runs int, p *GrowthPoint, sample *[]string) error {
	deep, cursor := runs/2, ""
	for at := 0; at < deep; {
		page, err := c.List(ctx, trellis.ListOptions{Limit: min(1000, deep-at), Cursor: cursor})
		if err != nil {
			return err
		}
		if page.NextCursor == "" {
			return fmt.Errorf("the list ended at %d runs, before %d", at+len(page.Runs), deep)
		}
		for i, r := range page.Runs {
			if (at+i)%10 == 0 && r.Status == trellis.StatusSucceeded {
				*sample = append(*sample, r.ID)
			}
		}
		at += len(page.Runs)
		cursor = page.NextCursor
	}
	p.ListDeepAt = deep
	for _, v := range []struct {
		cursor   string
		p50, p99 *float64
	}{{"", &p.ListFirstP50Ms, &p.ListFirstP99Ms}, {cursor, &p.ListDeepP50Ms, &p.ListDeepP99Ms}} {
		lat := make([]time.Duration, samples)
		for i := range samples {
			t0 := time.Now()
			page, err := c.List(ctx, trellis.ListOptions{Cursor: v.cursor})
			lat[i] = time.Since(t0)
			if err != nil {
				return err
			}
			if len(page.Runs) == 0 {
				return fmt.Errorf("an empty page")
			}
		}
		*v.p50, *v.p99 = percentile(lat, 50), percentile(lat, 99)
	}
	return nil
}

// growthGet times Get of random runs of the fill, by run ID.
func growthGet(ctx context.Context, c *trellis.Client, samples int, ids []string, p *GrowthPoint) error {
	if len(ids) == 0 {
		return fmt.Errorf("no run to get")
	}
	lat := make([]time.Duration, samples)
	for i := range samples {
		id := ids[rand.IntN(len(ids))]
		t0 := time.Now()
		r, err := c.Get(ctx, id)
		lat[i] = time.Since(t0)
		if err != nil {
			return err
		}
		if r.Status != trellis.StatusSucceeded {
			return fmt.Errorf("run %s is %s", id, r.Status)
		}
	}
	p.GetP50Ms, p.GetP99Ms = percentile(lat, 50), percentile(lat, 99)
	return nil
}

// growthClaim creates n ready runs that no worker serves, then claims them
// one at a time through the store, timing each claim, and ends each
// succeeded (so the store again holds finished runs only).
func growthClaim(ctx context.Context, st store.Store, n, size int, p *GrowthPoint) error {
	tag := strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := range n {
		id := fmt.Sprintf("growth-claim-%d-%s-%d", size, tag, i)
		if _, err := st.RunCreate(ctx, &store.RunCreateParams{Namespace: "bench", ID: id, WorkflowID: id,
			Workflow: growthClaimWorkflow, Queue: growthClaimQueue, Input: []byte("1")}); err != nil {
			return err
		}
	}
	lat := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		res, err := st.RunsClaim(ctx, &store.RunsClaimParams{Namespace: "bench", Queues: []string{growthClaimQueue},
			Workflows: []string{growthClaimWorkflow}, Worker: "bench-growth", Max: 1, LeaseDuration: time.Minute})
		took := time.Since(t0)
		if err != nil {
			return err
		}
		if len(res.Runs) != 1 {
			return fmt.Errorf("claimed %d runs, not 1", len(res.Runs))
		}
		lat = append(lat, took)
		cr := res.Runs[0]
		if _, err := st.Checkpoint(ctx, &store.CheckpointParams{
			Lease:  store.Lease{Namespace: "bench", RunID: cr.Run.ID, Token: cr.LeaseToken, RunSeq: cr.Run.Sequence},
			Status: store.StatusSucceeded, Output: []byte(`"ok"`)}); err != nil {
			return err
		}
	}
	p.ClaimP50Ms, p.ClaimP99Ms = percentile(lat, 50), percentile(lat, 99)
	return nil
}

// analyzePostgres analyzes the tables of a Postgres store's schema (a store
// with autovacuum on would have statistics of its size); nothing on SQLite.
func analyzePostgres(ctx context.Context, url string) error {
	if !strings.HasPrefix(url, "postgres") {
		return nil
	}
	conn, err := pgConn(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT tablename FROM pg_tables WHERE schemaname = current_schema()`)
	if err != nil {
		return err
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, t := range tables {
		if _, err := conn.Exec(ctx, "ANALYZE "+pgx.Identifier{t}.Sanitize()); err != nil {
			return err
		}
	}
	return nil
}

// storeBytes returns the store's size (GrowthPoint.StoreBytes) and, on
// SQLite, its files' size on disk.
func storeBytes(ctx context.Context, url string) (size, files int64, err error) {
	switch {
	case strings.HasPrefix(url, "sqlite:"):
		cfg, err := storesqlite.ParseURL(url)
		if err != nil {
			return 0, 0, err
		}
		db, err := sqlitedrv.Open(cfg.Path + "?_pragma=busy_timeout(10000)")
		if err != nil {
			return 0, 0, err
		}
		defer db.Close()
		var pages, free, pageSize int64
		for _, q := range []struct {
			pragma string
			v      *int64
		}{{"page_count", &pages}, {"freelist_count", &free}, {"page_size", &pageSize}} {
			if err := db.QueryRowContext(ctx, "PRAGMA "+q.pragma).Scan(q.v); err != nil {
				return 0, 0, err
			}
		}
		for _, f := range []string{cfg.Path, cfg.Path + "-wal"} {
			if fi, err := os.Stat(f); err == nil {
				files += fi.Size()
			}
		}
		return (pages - free) * pageSize, files, nil
	case strings.HasPrefix(url, "postgres"):
		conn, err := pgConn(ctx, url)
		if err != nil {
			return 0, 0, err
		}
		defer conn.Close(context.Background())
		err = conn.QueryRow(ctx, `SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0)::bigint
			FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p', 'm')`).Scan(&size)
		return size, 0, err
	}
	return 0, 0, fmt.Errorf("w8: unsupported store %q", url)
}

// GrowthPoints returns the points of a w8 result (also one decoded from its
// JSON line), or nil for another workload's.
func GrowthPoints(res *Result) []GrowthPoint {
	if res == nil || res.Workload != "w8" {
		return nil
	}
	switch v := res.Settings["points"].(type) {
	case []GrowthPoint:
		return v
	case nil:
		return nil
	default: // decoded from JSON: []any of maps
		b, err := json.Marshal(v)
		if err != nil {
			return nil
		}
		var pts []GrowthPoint
		if json.Unmarshal(b, &pts) != nil {
			return nil
		}
		return pts
	}
}

// WriteGrowthTable writes a w8 result as a table, a row per store size.
func WriteGrowthTable(w io.Writer, res *Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "runs\tfill/s\tw1/s\tclaim p50\tp99\tlist first p50\tp99\tlist deep p50\tp99\tget p50\tp99\tbytes/run\t\n")
	for _, p := range GrowthPoints(res) {
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.0f\t\n", p.Runs, p.FillPerS, p.W1PerS,
			p.ClaimP50Ms, p.ClaimP99Ms, p.ListFirstP50Ms, p.ListFirstP99Ms, p.ListDeepP50Ms, p.ListDeepP99Ms, p.GetP50Ms, p.GetP99Ms, p.BytesPerRun)
	}
	tw.Flush()
	fmt.Fprintf(w, "(latencies in ms; store %v)\n", res.Settings["store"])
}
