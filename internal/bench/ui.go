package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/sqlitedrv"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// ui1Namespace holds the seeded runs of ui1, apart from the other workloads'.
const ui1Namespace = "ui1"

// ui1Requests is how many page loads ui1 times per variant.
const ui1Requests = 40

// runUI1 is the --store form of ui1: it seeds the store (SQLite or Postgres)
// with bulk SQL (once: a store that holds n runs in namespace ui1 already is
// reused), serves the UI in process on loopback, and measures it as ui1
// measures a server given by --server (measureUI1).
func runUI1(ctx context.Context, n int, o Options) (*Result, error) {
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
		return nil, errors.New("ui1 seeds its store with bulk SQL: give --store sqlite:FILE or a postgres:// URL")
	}
	seedS := time.Since(seedStart).Seconds()

	l, err := startLocalServer(ctx, o.Store)
	if err != nil {
		return nil, err
	}
	defer l.close()
	res, err := measureUI1(ctx, l.base(), ui1Namespace, "", "failed")
	if err != nil {
		return nil, err
	}
	res.Settings["runs_stored"], res.Settings["seeded_now"], res.Settings["seed_s"] = n, seeded, seedS
	res.Settings["via"] = "in-process server"
	return res, nil
}

// runRemoteUI1 is ui1 through a server: it seeds namespace RemoteNamespace
// through the batch start route until it holds the n runs of ui1 (seedUI1Remote),
// then measures the runs page signed in with the token. The seeded runs are
// pending, in queues no worker serves, so the status variant filters on
// pending.
func runRemoteUI1(ctx context.Context, o RemoteOptions, n int) (*Result, error) {
	seedStart := time.Now()
	created, err := seedUI1Remote(ctx, o, n)
	if err != nil {
		return nil, fmt.Errorf("seeding: %w", err)
	}
	seedS := time.Since(seedStart).Seconds()
	res, err := measureUI1(ctx, o.Server, RemoteNamespace, o.Token, "pending")
	if err != nil {
		return nil, err
	}
	res.Settings["runs_stored"], res.Settings["seeded_now"], res.Settings["seed_s"] = n, created > 0, seedS
	res.Settings["runs_created"] = created
	return res, nil
}

// measureUI1 times loads of the runs page of namespace ns on the server at
// base over HTTP, as a browser makes them: the first page, a filter on
// statusFilter, a workflow filter (checkout) and the next page, ui1Requests
// each. With a token it signs in first through the UI's form (POST /ui/login),
// whose session cookie the page loads then carry; without one the server must
// be insecure.
func measureUI1(ctx context.Context, base, ns, token, statusFilter string) (*Result, error) {
	base = strings.TrimSuffix(base, "/")
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, Timeout: time.Minute,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer hc.CloseIdleConnections()
	if token != "" {
		req, err := http.NewRequestWithContext(ctx, "POST", base+"/ui/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", base) // as a browser sends it: the form's CSRF check
		res, err := hc.Do(req)
		if err != nil {
			return nil, fmt.Errorf("signing in to the web UI: %w", err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		switch {
		case res.StatusCode == http.StatusUnauthorized:
			return nil, fmt.Errorf("signing in to the web UI (POST /ui/login): %s: the UI refused the token", res.Status)
		case res.StatusCode != http.StatusSeeOther || len(res.Cookies()) == 0:
			return nil, fmt.Errorf("signing in to the web UI (POST /ui/login): %s, no session cookie", res.Status)
		}
	}
	runsURL := base + "/ui/" + ns + "/runs"
	get := func(url string) (string, time.Duration, error) {
		req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
		if err != nil {
			return "", 0, err
		}
		t0 := time.Now()
		res, err := hc.Do(req)
		if err != nil {
			return "", 0, err
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		took := time.Since(t0)
		if err == nil && res.StatusCode != 200 {
			err = fmt.Errorf("GET %s: %s %.300s", url, res.Status, b)
		}
		return string(b), took, err
	}
	// The next page's link, from the first page.
	first, _, err := get(runsURL)
	if err != nil {
		return nil, err
	}
	next := regexp.MustCompile(`href="([^"]*page_token=[^"]*)" id="older"`).FindStringSubmatch(first)
	if next == nil {
		return nil, fmt.Errorf("the first runs page has no next page")
	}
	nextURL := base + strings.ReplaceAll(next[1], "&amp;", "&")
	variants := []struct{ name, url string }{
		{"first", runsURL},
		{"status", runsURL + "?status=" + statusFilter},
		{"workflow", runsURL + "?workflow=checkout"},
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
	res.Settings = map[string]any{"requests": len(all), "requests_per_s": float64(len(all)) / wall.Seconds(),
		"p50_ms_by_page": byVariant, "status_filter": statusFilter}
	return res, nil
}

// ui1 through a server seeds runs with workflow IDs ui1-000000000, ... in
// batches of ui1SeedBatch, ui1SeedInFlight batches at a time.
const (
	ui1SeedBatch    = trellis.MaxStartMany
	ui1SeedInFlight = 4
)

func ui1WorkflowID(i int) string { return fmt.Sprintf("ui1-%09d", i) }

// seedUI1Remote makes namespace RemoteNamespace hold the n runs of ui1 through
// the server's batch start route (POST runs:batch, through the Go client):
// workflow IDs ui1-000000000 to ui1-(n-1), workflows checkout, refund, ship
// and notify in turn, in queues ui1-default, ui1-payments and ui1-mail, which
// no worker serves, so the runs stay pending. It first finds how many are
// there: seeding goes in order, so the runs present are a prefix but for the
// batches in flight when an earlier seeding stopped, and a binary search over
// GET runs/{workflow ID} finds the prefix's end in about 20 requests; it starts
// again that many batches earlier, each start rejected when its ID exists
// (ReuseReject). It returns how many runs it created.
func seedUI1Remote(ctx context.Context, o RemoteOptions, n int) (int, error) {
	c, err := openRemoteClient(ctx, o)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	exists := func(i int) (bool, error) {
		_, err := c.Get(ctx, ui1WorkflowID(i))
		if errors.Is(err, trellis.ErrRunNotFound) {
			return false, nil
		}
		return err == nil, err
	}
	// Not "is the last one there?": with batches in flight, a later batch may
	// have committed while an earlier one was cut off. A rerun always starts
	// again the batches in flight before the prefix's end.
	lo, hi := 0, n // the prefix ends in [lo, hi]; n stands for "all there"
	for lo < hi {
		mid := (lo + hi) / 2
		ok, err := exists(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	from := max(0, lo-ui1SeedInFlight*ui1SeedBatch) / ui1SeedBatch * ui1SeedBatch
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	workflows := []string{"checkout", "refund", "ship", "notify"}
	queues := []string{"ui1-default", "ui1-payments", "ui1-mail"}
	var (
		next    atomic.Int64
		created atomic.Int64
		wg      sync.WaitGroup
		errs    = make(chan error, ui1SeedInFlight)
	)
	next.Store(int64(from))
	for range ui1SeedInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			reqs := make([]trellis.StartRequest, 0, ui1SeedBatch)
			for ctx.Err() == nil {
				first := int(next.Add(ui1SeedBatch)) - ui1SeedBatch
				if first >= n {
					return
				}
				reqs = reqs[:0]
				for i := first; i < min(first+ui1SeedBatch, n); i++ {
					reqs = append(reqs, trellis.StartRequest{Workflow: workflows[i%len(workflows)],
						Input:   fmt.Appendf(nil, `{"order":%d}`, i),
						Options: trellis.StartOptions{ID: ui1WorkflowID(i), Queue: queues[i%len(queues)], Reuse: trellis.ReuseReject}})
				}
				results, err := c.StartMany(ctx, reqs)
				for i, r := range results {
					switch {
					case r.Created:
						created.Add(1)
					case r.Error != nil && !errors.Is(r.Error, trellis.ErrRunExists):
						err = fmt.Errorf("%s: %w", reqs[i].Options.ID, r.Error)
					}
				}
				if err != nil {
					errs <- err
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := errors.Join(collect(errs)...); err != nil {
		return int(created.Load()), err
	}
	return int(created.Load()), ctx.Err()
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
