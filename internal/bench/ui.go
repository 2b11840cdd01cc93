package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/sqlitedrv"
	"github.com/trellis-dev/trellis/server"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// ui1Namespace holds the seeded runs of ui1, apart from the other workloads'.
const ui1Namespace = "ui1"

// ui1Requests is how many page loads ui1 times per variant.
const ui1Requests = 40

// runUI1 measures the web UI's runs page with n runs stored: it seeds the
// store (SQLite or Postgres) with bulk SQL (once: a store that holds n runs in
// namespace ui1 already is reused), serves the UI in process on loopback, and times page
// loads through HTTP, as a browser makes them: the first page, a status filter,
// a workflow filter and the next page.
func runUI1(ctx context.Context, c *trellis.Client, n int, o Options) (*Result, error) {
	seedStart := time.Now()
	var seeded bool
	switch {
	case strings.HasPrefix(o.Store, "sqlite:"):
		cfg, err := storesqlite.ParseURL(o.Store)
		if err != nil {
			return nil, err
		}
		if seeded, err = seedUI1(ctx, cfg.Path, n); err != nil {
			return nil, fmt.Errorf("seeding: %w", err)
		}
	case strings.HasPrefix(o.Store, "postgres"):
		var err error
		if seeded, err = seedUI1Postgres(ctx, o.Store, n); err != nil {
			return nil, fmt.Errorf("seeding: %w", err)
		}
	default:
		return nil, fmt.Errorf("ui1 seeds its store with bulk SQL: give --store sqlite:FILE or postgres://...")
	}
	seedS := time.Since(seedStart).Seconds()

	srv, err := server.New(ctx, server.Config{Store: o.Store, Listen: "127.0.0.1:0", Insecure: true})
	if err != nil {
		return nil, err
	}
	defer srv.Shutdown(context.Background())
	if err := srv.Start(); err != nil {
		return nil, err
	}
	base := "http://" + srv.Addr().String() + "/ui/" + ui1Namespace + "/runs"
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: time.Minute}
	get := func(url string) (string, time.Duration, error) {
		t0 := time.Now()
		res, err := hc.Get(url)
		if err != nil {
			return "", 0, err
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		took := time.Since(t0)
		if err == nil && res.StatusCode != 200 {
			err = fmt.Errorf("GET %s: %d %.300s", url, res.StatusCode, b)
		}
		return string(b), took, err
	}
	// The next page's link, from the first page.
	first, _, err := get(base)
	if err != nil {
		return nil, err
	}
	next := regexp.MustCompile(`href="([^"]*page_token=[^"]*)" id="older"`).FindStringSubmatch(first)
	if next == nil {
		return nil, fmt.Errorf("the first runs page has no next page")
	}
	nextURL := "http://" + srv.Addr().String() + strings.ReplaceAll(next[1], "&amp;", "&")
	variants := []struct{ name, url string }{
		{"first", base},
		{"status", base + "?status=failed"},
		{"workflow", base + "?workflow=checkout"},
		{"next", nextURL},
	}
	var all []time.Duration
	byVariant := map[string]float64{}
	began := time.Now()
	for _, v := range variants {
		var lat []time.Duration
		for range ui1Requests {
			_, took, err := get(v.url)
			if err != nil {
				return nil, err
			}
			lat = append(lat, took)
		}
		byVariant[v.name] = pct(lat, 0.50)
		all = append(all, lat...)
	}
	wall := time.Since(began)
	res := &Result{WallS: wall.Seconds(), P50Ms: pct(all, 0.50), P99Ms: pct(all, 0.99)}
	res.Settings = map[string]any{"runs_stored": n, "seeded_now": seeded, "seed_s": seedS,
		"requests": len(all), "requests_per_s": float64(len(all)) / wall.Seconds(), "p50_ms_by_page": byVariant}
	return res, nil
}

// pct is the q-quantile of lat in milliseconds.
func pct(lat []time.Duration, q float64) float64 {
	s := slices.Clone(lat)
	slices.Sort(s)
	return float64(s[int(q*float64(len(s)-1))]) / float64(time.Millisecond)
}

// seedUI1 inserts runs until namespace ui1 holds n, in one transaction of
// INSERT ... SELECT over a recursive counter: a mix of statuses, workflows and
// queues, created one second apart, ending now. It reports whether it wrote.
func seedUI1(ctx context.Context, path string, n int) (bool, error) {
	// Open and migrate through the driver first, so the schema is current.
	st, err := trellis.OpenStore(ctx, "sqlite:"+path, nil)
	if err != nil {
		return false, err
	}
	st.Close()
	db, err := sqlitedrv.Open(path)
	if err != nil {
		return false, err
	}
	defer db.Close()
	var have int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM runs WHERE namespace = ?`, ui1Namespace).Scan(&have); err != nil {
		return false, err
	}
	if have >= n {
		return false, nil
	}
	now := time.Now().UnixNano()
	const second = int64(time.Second)
	// Statuses: 1% pending, 1% running, 3% waiting, 1% blocked, 80% succeeded,
	// 10% failed, 4% cancelled.
	_, err = db.ExecContext(ctx, `
WITH RECURSIVE c(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM c WHERE i < ?)
INSERT INTO runs (namespace, id, workflow_id, workflow, queue, status, input, output, error, wait_reason,
                  available_at, attempts, created_at, started_at, updated_at, finished_at)
SELECT ?, printf('ui1-%09d', i), printf('order-%09d', i),
       CASE i % 4 WHEN 0 THEN 'checkout' WHEN 1 THEN 'refund' WHEN 2 THEN 'ship' ELSE 'notify' END,
       CASE i % 3 WHEN 0 THEN 'default' WHEN 1 THEN 'payments' ELSE 'mail' END,
       s, '{"order":1}',
       CASE WHEN s = 'succeeded' THEN '"ok"' END,
       CASE WHEN s = 'failed' THEN '{"message":"card declined"}' END,
       CASE WHEN s = 'waiting' THEN 'waiting for event "go"' ELSE '' END,
       CASE WHEN s IN ('pending', 'waiting') THEN t + 3600 * ? END,
       1, t, t, t + ?, CASE WHEN s IN ('succeeded', 'failed', 'cancelled') THEN t + ? END
FROM (SELECT i, ? - (? - i) * ? AS t,
             CASE WHEN i % 100 = 0 THEN 'pending' WHEN i % 100 = 1 THEN 'running'
                  WHEN i % 100 < 5 THEN 'waiting' WHEN i % 100 = 5 THEN 'blocked'
                  WHEN i % 100 < 16 THEN 'failed' WHEN i % 100 < 20 THEN 'cancelled'
                  ELSE 'succeeded' END AS s
      FROM c)`,
		have+1, n, ui1Namespace, second, second/2, second/2, now, n, second)
	if err != nil {
		return false, err
	}
	return true, nil
}

// seedUI1Postgres seeds a Postgres store as seedUI1 seeds a SQLite file (the
// same runs), then vacuums and analyzes runs, as autovacuum does to a table
// that a million runs went through: the counts per status read runs_status
// alone only where the visibility map says its pages are all visible.
func seedUI1Postgres(ctx context.Context, url string, n int) (bool, error) {
	st, err := trellis.OpenStore(ctx, url, nil) // creates and migrates the schema
	if err != nil {
		return false, err
	}
	st.Close()
	conn, err := pgConn(ctx, url)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	var have int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM runs WHERE namespace = $1`, ui1Namespace).Scan(&have); err != nil {
		return false, err
	}
	if have >= n {
		return false, nil
	}
	_, err = conn.Exec(ctx, `
INSERT INTO runs (namespace, id, workflow_id, workflow, queue, status, input, output, error, wait_reason,
                  available_at, attempts, created_at, started_at, updated_at, finished_at)
SELECT $3, 'ui1-' || lpad(i::text, 9, '0'), 'order-' || lpad(i::text, 9, '0'),
       CASE i % 4 WHEN 0 THEN 'checkout' WHEN 1 THEN 'refund' WHEN 2 THEN 'ship' ELSE 'notify' END,
       CASE i % 3 WHEN 0 THEN 'default' WHEN 1 THEN 'payments' ELSE 'mail' END,
       s, '{"order":1}'::bytea,
       CASE WHEN s = 'succeeded' THEN '"ok"'::bytea END,
       CASE WHEN s = 'failed' THEN '{"message":"card declined"}' END,
       CASE WHEN s = 'waiting' THEN 'waiting for event "go"' ELSE '' END,
       CASE WHEN s IN ('pending', 'waiting') THEN t + interval '1 hour' END,
       1, t, t, t + interval '0.5 second',
       CASE WHEN s IN ('succeeded', 'failed', 'cancelled') THEN t + interval '0.5 second' END
FROM (SELECT i, now() - ($2::int - i) * interval '1 second' AS t,
             CASE WHEN i % 100 = 0 THEN 'pending' WHEN i % 100 = 1 THEN 'running'
                  WHEN i % 100 < 5 THEN 'waiting' WHEN i % 100 = 5 THEN 'blocked'
                  WHEN i % 100 < 16 THEN 'failed' WHEN i % 100 < 20 THEN 'cancelled'
                  ELSE 'succeeded' END AS s
      FROM generate_series($1::int, $2::int) AS i) AS g`, have+1, n, ui1Namespace)
	if err != nil {
		return false, err
	}
	if _, err := conn.Exec(ctx, `VACUUM ANALYZE runs`); err != nil {
		return false, err
	}
	return true, nil
}
