package storepg

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-dev/trellis/store"
)

const (
	// sqlWorkerUpsert creates or refreshes a worker's record; $8 (Start) resets
	// its started_at.
	// A live record of another owner than $9 is left alone (the caller tells
	// ErrWorkerOwned from the 0 rows), unless $9 is '' (the store's own
	// workers); a dead one (expired before $6, now) is taken over, as in
	// SQLite's.
	sqlWorkerUpsert = `INSERT INTO workers (namespace, name, workflows, queues, version,
	started_at, last_seen_at, expires_at, owner, versions) VALUES ($1, $2, $3, $4, $5, $6, $6, $7, $9, $10::jsonb)
	ON CONFLICT (namespace, name) DO UPDATE SET workflows = excluded.workflows,
	queues = excluded.queues, versions = excluded.versions, version = excluded.version, last_seen_at = excluded.last_seen_at,
	expires_at = excluded.expires_at, owner = excluded.owner,
	started_at = CASE WHEN $8::boolean THEN excluded.started_at ELSE workers.started_at END
	WHERE $9 = '' OR workers.owner = $9 OR workers.expires_at < $6`
	// sqlWorkersForget deletes a namespace's records dead since before $2.
	sqlWorkersForget = `DELETE FROM workers WHERE namespace = $1 AND expires_at < $2`
	sqlWorkerList    = `SELECT namespace, name, workflows, queues, version, started_at,
	last_seen_at, expires_at, owner, versions::text FROM workers WHERE namespace = $1 ORDER BY name`
	// sqlWorkerRemove deletes the record unless another owner than $3 made it
	// and it is live at $4 ($3 '': any owner) and returns whether such a
	// record is left.
	sqlWorkerRemove = `WITH d AS (DELETE FROM workers WHERE namespace = $1 AND name = $2
	AND ($3 = '' OR owner = $3 OR expires_at < $4) RETURNING 1)
	SELECT EXISTS (SELECT 1 FROM workers WHERE namespace = $1 AND name = $2) AND NOT EXISTS (SELECT 1 FROM d)`
)

// WorkerHeartbeat implements store.Store. A lost heartbeat is harmless (the next
// one rewrites the record), so it commits without waiting for the WAL flush.
func (s *Store) WorkerHeartbeat(ctx context.Context, p *store.WorkerHeartbeatParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("recording worker heartbeat: %w", err)
	}
	versions, err := store.VersionsJSON(p.Versions)
	if err != nil {
		return fmt.Errorf("recording worker heartbeat: %w", err)
	}
	now := s.now()
	var stmts []stmt
	if p.Start {
		stmts = append(stmts, stmt{sql: sqlWorkersForget, args: []any{p.Namespace, now.Add(-store.WorkerForgetAfter)}})
	}
	stmts = append(stmts, stmt{sql: sqlWorkerUpsert, args: []any{p.Namespace, p.Name,
		orEmpty(p.Workflows), orEmpty(p.Queues), p.Version, now, now.Add(p.TTL), p.Start, p.Owner, versions},
		tag: func(tag pgconn.CommandTag) error {
			if tag.RowsAffected() == 0 {
				return fmt.Errorf("%w: %q in namespace %q", store.ErrWorkerOwned, p.Name, p.Namespace)
			}
			return nil
		}})
	if _, err := s.writeNoSync(ctx, stmts...); err != nil {
		return fmt.Errorf("recording worker heartbeat: %w", err)
	}
	return nil
}

// WorkerList implements store.Store.
func (s *Store) WorkerList(ctx context.Context, p *store.WorkerListParams) ([]*store.Worker, error) {
	if s.closed() {
		return nil, fmt.Errorf("listing workers: %w", store.ErrClosed)
	}
	var ws []*store.Worker
	err := s.read(ctx, func() (err error) {
		ws, err = s.workerList(ctx, p.Namespace)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("listing workers: %w", s.readErr(err))
	}
	return ws, nil
}

func (s *Store) workerList(ctx context.Context, namespace string) ([]*store.Worker, error) {
	now := s.now()
	rows, err := s.pool.Query(ctx, sqlWorkerList, namespace)
	if err != nil {
		return nil, err
	}
	ws, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (*store.Worker, error) {
		var (
			w        store.Worker
			versions string
		)
		err := row.Scan(&w.Namespace, &w.Name, &w.Workflows, &w.Queues, &w.Version,
			&w.StartedAt, &w.LastSeenAt, &w.ExpiresAt, &w.Owner, &versions)
		if err == nil {
			w.Versions, err = store.VersionsFromJSON(versions)
		}
		w.StartedAt, w.LastSeenAt, w.ExpiresAt = w.StartedAt.UTC(), w.LastSeenAt.UTC(), w.ExpiresAt.UTC()
		w.Workflows, w.Queues = orEmpty(w.Workflows), orEmpty(w.Queues)
		w.Live = w.ExpiresAt.After(now)
		return &w, err
	})
	if err != nil {
		return nil, err
	}
	return orEmpty(ws), nil
}

// WorkerRemove implements store.Store.
func (s *Store) WorkerRemove(ctx context.Context, p *store.WorkerRemoveParams) error {
	var owned bool
	st := stmt{sql: sqlWorkerRemove, args: []any{p.Namespace, p.Name, p.Owner, s.now()}, rows: func(rows pgx.Rows) error {
		owned = false
		for rows.Next() {
			if err := rows.Scan(&owned); err != nil {
				return err
			}
		}
		return rows.Err()
	}}
	if _, err := s.writeNoSync(ctx, st); err != nil {
		return fmt.Errorf("removing worker: %w", err)
	}
	if owned {
		return fmt.Errorf("removing worker: %w: %q in namespace %q", store.ErrWorkerOwned, p.Name, p.Namespace)
	}
	return nil
}

// sqlWorkerCounts counts the live workers by namespace.
const sqlWorkerCounts = `SELECT namespace, count(*) FROM workers WHERE expires_at > $1 GROUP BY namespace`

// WorkerCounts implements store.WorkerCounter.
func (s *Store) WorkerCounts(ctx context.Context) ([]store.WorkerCount, error) {
	if s.closed() {
		return nil, fmt.Errorf("counting workers: %w", store.ErrClosed)
	}
	var out []store.WorkerCount
	err := s.read(ctx, func() error {
		rows, err := s.pool.Query(ctx, sqlWorkerCounts, s.now())
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (store.WorkerCount, error) {
			var c store.WorkerCount
			err := row.Scan(&c.Namespace, &c.Count)
			return c, err
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("counting workers: %w", s.readErr(err))
	}
	return out, nil
}
