package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/retention"
	"github.com/trellis-dev/trellis/internal/sqlitedrv"
	"github.com/trellis-dev/trellis/store/storesqlite"
)

// r1Rounds is how many times r1 measures w1 without and with the purger.
const r1Rounds = 3

// r1W1 is the size of each w1 measurement of r1.
const r1W1 = 10000

// runR1 seeds n runs of namespace "bench" that finished 60 days ago, each with
// three ops, by bulk SQL; then, r1Rounds times, runs w1 with no purger and
// again while a purger (the one embedded workers and servers run, with its
// defaults) deletes the expired runs on the same store. WorkflowsPerS is the
// median w1 rate while purging, BaselinePerS the median without, Ratio their
// quotient; Purged and PurgePerS count the runs the purger deleted meanwhile.
func runR1(ctx context.Context, n int, o Options) (*Result, error) {
	st, err := trellis.OpenStore(ctx, o.Store, time.Now)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	seedBegin := time.Now()
	if err := seedExpired(ctx, o.Store, n, time.Now().Add(-60*24*time.Hour)); err != nil {
		return nil, fmt.Errorf("seeding expired runs: %w", err)
	}
	seedS := time.Since(seedBegin).Seconds()
	c, err := trellis.Open(ctx, benchConfig(o, st))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	if err := c.Register(ctx, benchWorkflows...); err != nil {
		return nil, err
	}
	var base, purging []float64
	var purged int64
	var purgeTime time.Duration
	for range r1Rounds {
		r, err := runW1(ctx, c, r1W1)
		if err != nil {
			return nil, err
		}
		base = append(base, r.WorkflowsPerS)
		p := retention.New(retention.Config{Store: st})
		t0 := time.Now()
		p.Start()
		r, err = runW1(ctx, c, r1W1)
		p.Stop()
		purgeTime += time.Since(t0)
		purged += p.Deleted()
		if err != nil {
			return nil, err
		}
		purging = append(purging, r.WorkflowsPerS)
	}
	b, w := median(base), median(purging)
	ratio, purgeRate := w/b, float64(purged)/purgeTime.Seconds()
	return &Result{
		WallS: purgeTime.Seconds(), WorkflowsPerS: w, StepsPerS: 3 * w,
		BaselinePerS: &b, Ratio: &ratio, Purged: &purged, PurgePerS: &purgeRate, SeedS: &seedS,
		Rounds: map[string][]float64{"baseline": base, "purging": purging},
	}, nil
}

func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

// seedExpired inserts n finished runs (workflow "bench-expired", namespace
// "bench") with three done ops each, finished at t, in two statements.
func seedExpired(ctx context.Context, url string, n int, t time.Time) error {
	tag := fmt.Sprintf("%x", time.Now().UnixNano())
	result := `'"` + payload + `"'`
	switch {
	case strings.HasPrefix(url, "sqlite:"):
		cfg, err := storesqlite.ParseURL(url)
		if err != nil {
			return err
		}
		db, err := sqlitedrv.Open(cfg.Path + "?_pragma=busy_timeout(10000)")
		if err != nil {
			return err
		}
		defer db.Close()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		var before int64
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(sequence), 0) FROM runs`).Scan(&before); err != nil {
			return err
		}
		ts := t.UnixNano()
		if _, err := tx.ExecContext(ctx, `WITH RECURSIVE k(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM k WHERE i < ?1)
			INSERT INTO runs (namespace, id, workflow_id, workflow, queue, status, input, output, available_at,
				attempts, created_at, started_at, updated_at, finished_at)
			SELECT 'bench', 'expired-' || ?2 || '-' || i, 'expired-' || ?2 || '-' || i, 'bench-expired', 'default',
				'succeeded', '1', '"ok"', ?3, 1, ?3, ?3, ?3, ?3 FROM k`, n, tag, ts); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO ops (run_seq, position, kind, name, done, result, attempts, started_at, finished_at)
			SELECT r.sequence, p.pos, 'step', p.name, 1, `+result+`, 1, ?2, ?2
			FROM runs r, (SELECT 0 AS pos, 'a' AS name UNION ALL SELECT 1, 'b' UNION ALL SELECT 2, 'c') p
			WHERE r.sequence > ?1`, before, ts); err != nil {
			return err
		}
		return tx.Commit()
	case strings.HasPrefix(url, "postgres"):
		conn, err := pgConn(ctx, url)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var before int64
			if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(sequence), 0) FROM runs`).Scan(&before); err != nil {
				return err
			}
			if _, err := tx.Exec(ctx, `INSERT INTO runs (namespace, id, workflow_id, workflow, queue, status, input, output,
				available_at, attempts, created_at, started_at, updated_at, finished_at)
				SELECT 'bench', 'expired-' || $2 || '-' || i, 'expired-' || $2 || '-' || i, 'bench-expired', 'default',
					'succeeded', '1', '"ok"', $3, 1, $3, $3, $3, $3 FROM generate_series(1, $1::int) AS i`, n, tag, t); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO ops (run_seq, position, kind, name, done, result, attempts, started_at, finished_at)
				SELECT r.sequence, p.pos, 'step', p.name, true, `+result+`::bytea, 1, $2, $2
				FROM runs r, (VALUES (0, 'a'), (1, 'b'), (2, 'c')) AS p(pos, name)
				WHERE r.sequence > $1`, before, t)
			if err != nil {
				return err
			}
			// A store with a million finished runs has statistics that say so.
			_, err = tx.Exec(ctx, `ANALYZE runs; ANALYZE ops`)
			return err
		})
	}
	return fmt.Errorf("r1: unsupported store %q", url)
}
