package sqlstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// A guarded call (one whose parameters carry a store.IdempotencyRecord) calls
// IdempotencyBegin first in its transaction, before it changes anything, and
// IdempotencyFinish last. Begin inserts the key at once: a concurrent duplicate's
// insert waits on it (Postgres) or runs after it (SQLite's single writer), finds it,
// and fails with store.ErrIdempotencyKeyUsed or store.ErrIdempotencyKeyConflict
// before doing anything, so exactly one of them executes and none fails with the
// guarded change's own errors (a run ID already taken, say).

// idemQueries are the statements of idempotency keys.
type idemQueries struct {
	insert, fingerprint, finish, get, purge string
}

func newIdemQueries(r func(string) string) idemQueries {
	return idemQueries{
		// insert records a key, or takes over its expired entry; no row changes
		// when an unexpired entry has it.
		insert: r(`INSERT INTO idempotency_keys AS k (namespace, key, fingerprint, status, created_at)
	VALUES ($1, $2, $3, 0, $4) ON CONFLICT (namespace, key) DO UPDATE
	SET fingerprint = excluded.fingerprint, status = 0, body = NULL, run_seq = NULL, created_at = excluded.created_at
	WHERE k.created_at <= $5`),
		fingerprint: r(`SELECT fingerprint FROM idempotency_keys WHERE namespace = $1 AND key = $2`),
		finish:      r(`UPDATE idempotency_keys SET status = $3, body = $4, run_seq = $5 WHERE namespace = $1 AND key = $2`),
		get: r(`SELECT namespace, key, fingerprint, status, body, created_at FROM idempotency_keys
	WHERE namespace = $1 AND key = $2 AND created_at > $3`),
		purge: r(`DELETE FROM idempotency_keys WHERE (namespace, key) IN (SELECT namespace, key
	FROM idempotency_keys WHERE created_at <= $1 ORDER BY created_at LIMIT $2)`),
	}
}

// IdempotencyBegin records r's key in namespace, without its response yet, or
// fails, writing nothing, when an unexpired entry has it. A nil r does nothing.
func (s *SQL) IdempotencyBegin(tx Tx, namespace string, r *store.IdempotencyRecord) error {
	if r == nil {
		return nil
	}
	cutoff := s.d.Time(tx.Now().Add(-store.IdempotencyTTL))
	n, err := tx.Exec(s.idem.insert, namespace, r.Key, r.Fingerprint, s.d.Time(tx.Now()), cutoff)
	if err != nil {
		return fmt.Errorf("recording idempotency key: %w", err)
	}
	if n == 1 {
		return nil
	}
	var fp []byte
	if err := tx.QueryRow(s.idem.fingerprint, namespace, r.Key).Scan(&fp); err != nil {
		return fmt.Errorf("reading idempotency key: %w", err)
	}
	if bytes.Equal(fp, r.Fingerprint) {
		return fmt.Errorf("%w: %q", store.ErrIdempotencyKeyUsed, r.Key)
	}
	return fmt.Errorf("%w: %q", store.ErrIdempotencyKeyConflict, r.Key)
}

// IdempotencyFinish stores the response r renders for the call's result under the
// key IdempotencyBegin recorded. A nil r does nothing.
func (s *SQL) IdempotencyFinish(tx Tx, namespace string, r *store.IdempotencyRecord, result any) error {
	if r == nil {
		return nil
	}
	status, body, err := r.Render(result)
	if err != nil {
		return fmt.Errorf("rendering the response of idempotency key %q: %w", r.Key, err)
	}
	if _, err := tx.Exec(s.idem.finish, namespace, r.Key, status, Blob(body), RunSeqOf(result)); err != nil {
		return fmt.Errorf("recording idempotent response: %w", err)
	}
	return nil
}

// Guarded runs change between IdempotencyBegin and IdempotencyFinish of r's key
// in namespace, so that the key, the change and its response commit together;
// change returns the result the response is rendered from. A nil r runs change
// alone.
func (s *SQL) Guarded(tx Tx, namespace string, r *store.IdempotencyRecord, change func() (any, error)) error {
	if err := s.IdempotencyBegin(tx, namespace, r); err != nil {
		return err
	}
	result, err := change()
	if err != nil {
		return err
	}
	return s.IdempotencyFinish(tx, namespace, r, result)
}

// IdempotencyGet reads an unexpired entry at now.
func (s *SQL) IdempotencyGet(q Querier, p *store.IdempotencyGetParams, now time.Time) (*store.IdempotencyEntry, error) {
	var (
		e       store.IdempotencyEntry
		created Time
	)
	err := q.QueryRow(s.idem.get, p.Namespace, p.Key, s.d.Time(now.Add(-store.IdempotencyTTL))).
		Scan(&e.Namespace, &e.Key, &e.Fingerprint, &e.Status, &e.Body, &created)
	if errors.Is(err, ErrNoRows) {
		return nil, fmt.Errorf("%w: %q in namespace %q", store.ErrIdempotencyKeyNotFound, p.Key, p.Namespace)
	}
	if err != nil {
		return nil, err
	}
	e.CreatedAt = created.T
	return &e, nil
}

// IdempotencyPurge deletes up to limit (0: 1000) entries expired at tx.Now().
func (s *SQL) IdempotencyPurge(tx Tx, limit int) (int, error) {
	if limit <= 0 {
		limit = 1000
	}
	n, err := tx.Exec(s.idem.purge, s.d.Time(tx.Now().Add(-store.IdempotencyTTL)), limit)
	return int(n), err
}

// IdempotencyGet implements store.IdempotencyStore; now is the driver's clock.
func (r Reads) IdempotencyGet(ctx context.Context, p *store.IdempotencyGetParams, now time.Time) (*store.IdempotencyEntry, error) {
	var e *store.IdempotencyEntry
	err := r.read(ctx, "getting idempotency key", func(q Querier) (err error) {
		e, err = r.sql.IdempotencyGet(q, p, now)
		return err
	})
	if err != nil {
		return nil, err
	}
	return e, nil
}
