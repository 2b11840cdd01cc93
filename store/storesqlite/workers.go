package storesqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/trellis-dev/trellis/store"
)

const (
	// sqlWorkerUpsert creates or refreshes a worker's record; ?8 (Start) resets
	// its started_at. A live record of another owner than ?9 is left alone
	// (no change: the caller tells ErrWorkerOwned), unless ?9 is '' (the
	// store's own workers); a dead one (expired before ?6, now) is taken over:
	// that grants nothing, and a worker that comes back under a new token, or
	// from before records had owners, is not locked out of its name.
	sqlWorkerUpsert = `INSERT INTO workers (namespace, name, workflows, queues, version,
	started_at, last_seen_at, expires_at, owner, versions) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?6, ?7, ?9, ?10)
	ON CONFLICT (namespace, name) DO UPDATE SET workflows = excluded.workflows,
	queues = excluded.queues, versions = excluded.versions, version = excluded.version, last_seen_at = excluded.last_seen_at,
	expires_at = excluded.expires_at, owner = excluded.owner,
	started_at = CASE WHEN ?8 THEN excluded.started_at ELSE workers.started_at END
	WHERE ?9 = '' OR workers.owner = ?9 OR workers.expires_at < ?6`
	// sqlWorkersForget deletes a namespace's records dead since before ?2.
	sqlWorkersForget = `DELETE FROM workers WHERE namespace = ?1 AND expires_at < ?2`
	sqlWorkerList    = `SELECT namespace, name, workflows, queues, version, started_at,
	last_seen_at, expires_at, owner, versions FROM workers WHERE namespace = ?1 ORDER BY name`
	// sqlWorkerRemove deletes a record of owner ?3 (any owner when ?3 is '',
	// or when it is dead at ?4); sqlWorkerOwner tells an absent record from
	// another owner's.
	sqlWorkerRemove = `DELETE FROM workers WHERE namespace = ?1 AND name = ?2 AND (?3 = '' OR owner = ?3 OR expires_at < ?4)`
	sqlWorkerOwner  = `SELECT owner FROM workers WHERE namespace = ?1 AND name = ?2`
)

// WorkerHeartbeat implements store.Store. A lost heartbeat is harmless (the next
// one rewrites the record), so it commits without fsync.
func (s *Store) WorkerHeartbeat(ctx context.Context, p *store.WorkerHeartbeatParams) error {
	if err := p.Validate(); err != nil {
		return fmt.Errorf("recording worker heartbeat: %w", err)
	}
	wfs, err := jsonList(append([]string{}, p.Workflows...))
	if err != nil {
		return fmt.Errorf("recording worker heartbeat: %w", err)
	}
	queues, err := jsonList(append([]string{}, p.Queues...))
	if err != nil {
		return fmt.Errorf("recording worker heartbeat: %w", err)
	}
	versions, err := store.VersionsJSON(p.Versions)
	if err != nil {
		return fmt.Errorf("recording worker heartbeat: %w", err)
	}
	err = s.writeNoSync(ctx, func(tx *wtx) error {
		now := tx.now.UnixNano()
		if p.Start {
			if _, err := tx.exec(sqlWorkersForget, p.Namespace, tx.now.Add(-store.WorkerForgetAfter).UnixNano()); err != nil {
				return err
			}
		}
		res, err := tx.exec(sqlWorkerUpsert, p.Namespace, p.Name, wfs, queues, p.Version,
			now, tx.now.Add(p.TTL).UnixNano(), boolInt(p.Start), p.Owner, versions)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err == nil && n == 0 {
			return fmt.Errorf("%w: %q in namespace %q", store.ErrWorkerOwned, p.Name, p.Namespace)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("recording worker heartbeat: %w", err)
	}
	return nil
}

// WorkerList implements store.Store.
func (s *Store) WorkerList(ctx context.Context, p *store.WorkerListParams) ([]*store.Worker, error) {
	if s.closed() {
		return nil, fmt.Errorf("listing workers: %w", store.ErrClosed)
	}
	ws, err := s.workerList(ctx, p.Namespace)
	if err != nil {
		return nil, fmt.Errorf("listing workers: %w", s.readErr(err))
	}
	return ws, nil
}

func (s *Store) workerList(ctx context.Context, namespace string) ([]*store.Worker, error) {
	now := s.now()
	rows, err := s.reads.QueryContext(ctx, sqlWorkerList, namespace)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	ws := []*store.Worker{}
	for rows.Next() {
		w, err := scanWorker(rows)
		if err != nil {
			return nil, err
		}
		w.Live = w.ExpiresAt.After(now)
		ws = append(ws, w)
	}
	return ws, rows.Err()
}

func scanWorker(sc scanner) (*store.Worker, error) {
	var (
		w                        store.Worker
		wfs, queues, versions    string
		started, seen, expiresAt int64
		err                      error
	)
	if err := sc.Scan(&w.Namespace, &w.Name, &wfs, &queues, &w.Version, &started, &seen, &expiresAt, &w.Owner, &versions); err != nil {
		return nil, err
	}
	if w.Versions, err = store.VersionsFromJSON(versions); err != nil {
		return nil, fmt.Errorf("worker %q: %w", w.Name, err)
	}
	if err := json.Unmarshal([]byte(wfs), &w.Workflows); err != nil {
		return nil, fmt.Errorf("decoding workflows of worker %q: %w", w.Name, err)
	}
	if err := json.Unmarshal([]byte(queues), &w.Queues); err != nil {
		return nil, fmt.Errorf("decoding queues of worker %q: %w", w.Name, err)
	}
	w.StartedAt = fromNS(sql.NullInt64{Int64: started, Valid: true})
	w.LastSeenAt = fromNS(sql.NullInt64{Int64: seen, Valid: true})
	w.ExpiresAt = fromNS(sql.NullInt64{Int64: expiresAt, Valid: true})
	return &w, nil
}

// WorkerRemove implements store.Store.
func (s *Store) WorkerRemove(ctx context.Context, p *store.WorkerRemoveParams) error {
	err := s.writeNoSync(ctx, func(tx *wtx) error {
		res, err := tx.exec(sqlWorkerRemove, p.Namespace, p.Name, p.Owner, tx.now.UnixNano())
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n > 0 || p.Owner == "" {
			return err
		}
		var owner string
		switch err := tx.queryRow(sqlWorkerOwner, p.Namespace, p.Name).Scan(&owner); {
		case errors.Is(err, sql.ErrNoRows):
			return nil // no record: nothing to remove
		case err != nil:
			return err
		}
		return fmt.Errorf("%w: %q in namespace %q", store.ErrWorkerOwned, p.Name, p.Namespace)
	})
	if err != nil {
		return fmt.Errorf("removing worker: %w", err)
	}
	return nil
}

// sqlWorkerCounts counts the live workers by namespace.
const sqlWorkerCounts = `SELECT namespace, count(*) FROM workers WHERE expires_at > ?1 GROUP BY namespace`

// WorkerCounts implements store.WorkerCounter.
func (s *Store) WorkerCounts(ctx context.Context) ([]store.WorkerCount, error) {
	if s.closed() {
		return nil, fmt.Errorf("counting workers: %w", store.ErrClosed)
	}
	rows, err := s.reads.QueryContext(ctx, sqlWorkerCounts, s.now().UnixNano())
	if err != nil {
		return nil, fmt.Errorf("counting workers: %w", s.readErr(err))
	}
	defer rows.Close()
	out := []store.WorkerCount{}
	for rows.Next() {
		var c store.WorkerCount
		if err := rows.Scan(&c.Namespace, &c.Count); err != nil {
			return nil, fmt.Errorf("counting workers: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("counting workers: %w", s.readErr(err))
	}
	return out, nil
}
