package storepg

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-dev/trellis/internal/batch"
	"github.com/trellis-dev/trellis/store"
)

// Group commit for creates with an idempotency key. Such a create records its key
// in its own transaction (the writer's batches cannot branch on what a statement
// found), and a transaction per start cost about five round trips and a commit:
// through a server, where the Go client sends a key with every start, that was
// most of Postgres' work for a workflow. The keyed creator commits the keyed
// creates waiting at the same time in one transaction of three steps, each a
// pipelined round trip (keyedCreates), or, when every create of the batch has
// the default reuse policy and its own key and run ID (the common case), of two
// round trips in all, BEGIN and COMMIT included (keyedPipelined):
//
//  1. every create's key, in one statement: inserted, or taken over when it
//     expired (as IdempotencyBegin does); a key inserted by a concurrent
//     transaction makes the insert wait for that commit, then find the key;
//  2. the runs of the creates whose key is new: one merged statement for those of
//     the default reuse policy (sqlRunCreates, as the writer's plain creates),
//     a statement each for the others; and, for the creates whose key was
//     there already, the recorded
//     fingerprint, to tell a retry (store.ErrIdempotencyKeyUsed) from a reuse by
//     another request (store.ErrIdempotencyKeyConflict);
//  3. the rendered responses stored with their keys, and the keys of rejected
//     starts (a taken run or workflow ID) deleted: a call that fails records
//     nothing.
//
// A lone create whose key is new and whose run is created (almost every start
// of a client that starts one run at a time) takes one statement, its run's
// insert and its key's, in one round trip (keyedOne); any other outcome of it
// is decided by keyedCreates.
//
// One goroutine commits the batches one after the other, so two batches never
// wait for each other's keys.
type keyedCreator struct {
	s        *Store
	reqs     chan *keyedReq
	quit     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	// For tests: pipelined counts the batches keyedPipelined committed, lone
	// the creates keyedOne made, mispredicted the responses keyedOne stored
	// and corrected after the commit, as rendered from the run created
	// (none).
	pipelined, lone, mispredicted atomic.Int64
}

// keyedReq is a keyed create waiting for the keyed creator.
type keyedReq struct {
	ctx    context.Context
	p      *store.RunCreateParams
	create stmt   // the create statement; its reader sets *res
	cr     *crReq // the create, for a merged statement (sqlRunCreates)
	res    *(*store.RunCreateResult)
	topics []string
	out    *store.RunCreateResult
	err    error
	done   chan struct{}
}

func startKeyedCreator(s *Store) *keyedCreator {
	k := &keyedCreator{s: s, reqs: make(chan *keyedReq), quit: make(chan struct{})}
	k.wg.Go(func() { batch.Run(k.reqs, k.quit, s.cfg.MaxBatch, k.commit) })
	return k
}

// stop ends the keyed creator after its current batch.
func (k *keyedCreator) stop() {
	k.stopOnce.Do(func() { close(k.quit) })
	k.wg.Wait()
}

// createKeyed creates a run with an idempotency key through the keyed creator.
func (s *Store) createKeyed(ctx context.Context, r *keyedReq) (*store.RunCreateResult, error) {
	r.ctx, r.done = ctx, make(chan struct{})
	select {
	case s.k.reqs <- r:
	case <-s.k.quit:
		return nil, store.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case <-r.done:
		return r.out, r.err
	case <-ctx.Done():
		return nil, ctx.Err() // it may still commit, as any write whose caller left
	}
}

// keyedState is what a batch found for one create; reset on each try.
type keyedState struct {
	keyNew bool
	fp     []byte // the recorded fingerprint, when the key was there
}

func (k *keyedCreator) commit(reqs []*keyedReq) {
	live := reqs[:0:0]
	for _, r := range reqs {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			close(r.done)
			continue
		}
		live = append(live, r)
	}
	if len(live) == 0 {
		return
	}
	states := make([]keyedState, len(live))
	// Either way the topics of the created runs are published once the batch
	// commits.
	var (
		err     error
		decided bool
	)
	switch {
	case lone(live):
		// One statement when the key is new and the run created; anything
		// else is decided by keyedCreates below.
		err = k.s.retryTx(context.Background(), func(ctx context.Context) (topics []string, err error) {
			decided, topics, err = k.s.keyedOne(ctx, live[0], &states[0])
			return topics, err
		})
		if err == nil && decided {
			k.lone.Add(1)
		}
	case pipelinable(live):
		err = k.s.retryTx(context.Background(), func(ctx context.Context) ([]string, error) {
			return k.s.keyedPipelined(ctx, live, states)
		})
		decided = true
		if err == nil {
			k.pipelined.Add(1)
		}
	}
	if err == nil && !decided {
		err = k.s.inTx(context.Background(), func(tx *wtx) error { return keyedCreates(tx, live, states) })
	}
	for i, r := range live {
		switch {
		case err != nil:
			r.err = err
		case !states[i].keyNew && bytes.Equal(states[i].fp, r.p.Idempotency.Fingerprint):
			r.err = fmt.Errorf("%w: %q", store.ErrIdempotencyKeyUsed, r.p.Idempotency.Key)
		case !states[i].keyNew:
			r.err = fmt.Errorf("%w: %q", store.ErrIdempotencyKeyConflict, r.p.Idempotency.Key)
		case *r.res == nil:
			r.err = store.RunExistsError(r.p.ID, r.p.WorkflowID, r.p.Reuse)
		default:
			r.out = *r.res
		}
	}
	for _, r := range live {
		close(r.done)
	}
}

// pipelinable reports whether a batch of keyed creates can take the pipelined
// transaction (keyedPipelined): every create of the default reuse policy, and
// no key or run ID twice in the batch. Others (a retry racing its first try in
// one batch, say) take keyedCreates.
func pipelinable(reqs []*keyedReq) bool {
	seen := make(map[string]bool, 2*len(reqs))
	for _, r := range reqs {
		key := "k\x00" + r.p.Namespace + "\x00" + r.p.Idempotency.Key
		id := "r\x00" + r.p.Namespace + "\x00" + r.p.ID
		if r.p.Reuse != store.ReuseRejectActive || r.cr == nil || seen[key] || seen[id] {
			return false
		}
		seen[key], seen[id] = true, true
	}
	return true
}

// keyedPipelined is one attempt of a pipelinable batch of keyed creates: the
// three steps of keyedCreates in two round trips instead of five (BEGIN, three
// statements, COMMIT each waiting for the one before). Through a server, where
// every start carries a key, those round trips were a third of a start's
// latency on Postgres (w3). The first round trip sends BEGIN, the keys
// (sqlKeysInsert) and the runs, each inserted only when this transaction
// inserted its key (sqlRunCreatesKeyed: a statement sees the rows of the
// earlier ones of its transaction, and a key another transaction holds makes
// the key's insert wait for that one's end, as in keyedCreates). The second
// sends the fingerprints of the keys that were there (a read: at that point they
// are committed), the responses rendered in between, the keys of rejected
// starts taken back, and COMMIT. On any failure the connection goes back to the
// pool inside its transaction, and the pool closes it: nothing is written. It
// returns the topics to publish.
func (s *Store) keyedPipelined(ctx context.Context, reqs []*keyedReq, states []keyedState) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
	defer cancel()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Release()
	now := s.now().Truncate(time.Microsecond)
	var (
		nss, keys = make([]string, len(reqs)), make([]string, len(reqs))
		fps       = make([][]byte, len(reqs))
		crs       = make([]*crReq, len(reqs))
		byKey     = make(map[string]int, len(reqs))
	)
	for i, r := range reqs {
		states[i] = keyedState{}
		nss[i], keys[i], fps[i], crs[i] = r.p.Namespace, r.p.Idempotency.Key, r.p.Idempotency.Fingerprint, r.cr
		byKey[r.p.Namespace+"\x00"+r.p.Idempotency.Key] = i
	}
	create := keyedCreatesStmt(crs, keys)
	b := &pgx.Batch{}
	b.Queue("BEGIN")
	b.Queue(sqlKeysInsert, nss, keys, fps, now, now.Add(-store.IdempotencyTTL))
	b.Queue(create.sql, create.args...)
	br := conn.SendBatch(ctx, b)
	err = readKeysAndRuns(br, b.Len()-2, create, func(ns, key string) { states[byKey[ns+"\x00"+key]].keyNew = true })
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("creating runs: %w", err)
	}
	var (
		out  keyResponses
		seen []int // the creates whose key was there, in the order of their fingerprints' reads
	)
	b = &pgx.Batch{}
	for i, r := range reqs {
		if !states[i].keyNew {
			b.Queue(sqlKeyFingerprint, r.p.Namespace, r.p.Idempotency.Key)
			seen = append(seen, i)
			continue
		}
		if err := out.add(r); err != nil {
			return nil, err
		}
	}
	out.queue(b)
	b.Queue("COMMIT")
	br = conn.SendBatch(ctx, b)
	err = readFinish(br, b.Len(), seen, states)
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("recording idempotency keys: %w", err)
	}
	return out.topics, nil
}

// lone reports whether a batch of keyed creates is one create keyedOne can
// make: pipelinable, with a lone create's statement, and a Response to
// render (a record without one keeps the store's result as JSON, sequence
// included, which keyedOne cannot render before the insert).
func lone(reqs []*keyedReq) bool {
	if len(reqs) != 1 || !pipelinable(reqs) || reqs[0].p.Idempotency.Response == nil {
		return false
	}
	_, ok := keyedLone[reqs[0].create.sql]
	return ok
}

// keyedOne makes a lone keyed create (every start of a client that starts one
// run at a time, as every start through a server carries a key) in one
// statement and its own implicit transaction, when its key is new and its run
// is created (decided): the run's insert, then its key's (keyRecord). The
// transactions of keyedPipelined took two round trips, BEGIN to COMMIT, and
// five statements; through a server that was about a tenth of w3's latency on
// Postgres (docs/benchmarks.md). The response is rendered before anything is
// sent, from the run the create will return (crReq.expected): for a create
// with a claim, once for the run claimed and once for the run left pending (a
// queue that limits claims); the statement keeps the one of the status the
// insert gave the run. After the commit the response is rendered once more,
// from the run as created: that is the rendering the caller's Response keeps
// (the last one, as the contract has it), and should it differ from the body
// stored (a prediction that missed a column) the stored body is corrected at
// once. Any other outcome is not decided here, and nothing is written: a key
// recorded already fails the statement (a unique violation), and a run not
// created (its ID taken, or a concurrent first try of the same request
// holding it) leaves the key unrecorded; keyedCreates decides those.
func (s *Store) keyedOne(ctx context.Context, r *keyedReq, st *keyedState) (decided bool, topics []string, err error) {
	*st = keyedState{}
	*r.res = nil
	p, rec := r.p, r.p.Idempotency
	// Index 0 is the response for the run pending, 1 for the run claimed,
	// the one a create with a claim almost always gives, rendered last.
	var (
		statuses [2]int32
		bodies   [2][]byte
	)
	for i, claimed := range []bool{false, true} {
		if claimed && r.cr.claim == nil {
			statuses[1], bodies[1] = statuses[0], bodies[0]
			break
		}
		status, body, err := rec.Render(r.cr.expected(claimed))
		if err != nil {
			return false, nil, fmt.Errorf("rendering the response of idempotency key %q: %w", rec.Key, err)
		}
		statuses[i], bodies[i] = int32(status), body
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.WriteTimeout)
	defer cancel()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return false, nil, err
	}
	defer conn.Release()
	create := r.create
	b := &pgx.Batch{}
	if create.generic {
		b.Queue(sqlGenericPlans) // for the statement after it: the batch is one implicit transaction
	}
	b.Queue(keyedLone[create.sql], append(slices.Clip(create.args), rec.Key, rec.Fingerprint,
		statuses[0], bodies[0], statuses[1], bodies[1])...)
	br := conn.SendBatch(ctx, b)
	if create.generic {
		_, err = br.Exec()
	}
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			err = create.rows(rows)
			rows.Close()
			err = errors.Join(err, rows.Err())
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "idempotency_keys_pkey":
		return false, nil, nil
	case err != nil:
		return false, nil, fmt.Errorf("creating run: %w", err)
	case *r.res == nil:
		return false, nil, nil
	}
	st.keyNew = true
	res := *r.res
	status, body, err := rec.Render(res)
	stored := 0
	if res.Run.Status == store.StatusRunning {
		stored = 1
	}
	if err == nil && (int32(status) != statuses[stored] || !bytes.Equal(body, bodies[stored])) {
		s.k.mispredicted.Add(1)
		_, err = conn.Exec(ctx, sqlKeyFinish, p.Namespace, rec.Key, int32(status), body, res.Run.Sequence)
	}
	if err != nil {
		// The run and its key are committed, with the response rendered
		// before: a retry of the request gets that one.
		s.log.Error("storepg: recording the response of an idempotency key after its create", "key", rec.Key, "err", err)
	}
	return true, r.topics, nil
}

// expected is the result the create of c returns when it creates its run,
// claimed (its claim taken) or not, as scanCreated reads it (times to the
// microsecond, in UTC): what keyedOne renders the response from before the
// create is sent. The run is made as the SQL drivers make theirs
// (RunCreateParams.NewRun, CreateClaim.Apply).
func (c *crReq) expected(claimed bool) *store.RunCreateResult {
	us := func(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }
	run := c.p.NewRun(c.now, us)
	res := &store.RunCreateResult{Run: run, Created: true}
	if claimed && c.claim != nil {
		res.Claimed = c.p.Claim.Apply(run, run.CreatedAt)
		res.Claimed.LeaseExpiresAt = us(res.Claimed.LeaseExpiresAt) // run.LeaseExpiresAt points at it
	}
	return res
}

// keyResponses are what step 3 records of a batch: the responses of the
// creates whose key is new, and the keys of the starts rejected among them,
// taken back.
type keyResponses struct {
	fin, del keyCols
	statuses []int32
	bodies   [][]byte
	seqs     []int64
	topics   []string // of the runs created
}

// add takes the outcome of create r, whose key is new: its rendered response,
// or its key to take back when the start was rejected.
func (k *keyResponses) add(r *keyedReq) error {
	res, rec := *r.res, r.p.Idempotency
	if res == nil {
		k.del.add(r.p.Namespace, rec.Key)
		return nil
	}
	status, body, err := rec.Render(res)
	if err != nil {
		return fmt.Errorf("rendering the response of idempotency key %q: %w", rec.Key, err)
	}
	k.topics = append(k.topics, r.topics...)
	k.fin.add(r.p.Namespace, rec.Key)
	k.statuses, k.bodies, k.seqs = append(k.statuses, int32(status)), append(k.bodies, body), append(k.seqs, res.Run.Sequence)
	return nil
}

// queue queues the statements that record them: a statement each, of one key
// by its primary key (a lone start's: planned once with it, see stmt.generic)
// or of many over arrays.
func (k *keyResponses) queue(b *pgx.Batch) {
	switch len(k.fin.keys) {
	case 0:
	case 1:
		b.Queue(sqlKeyFinish, k.fin.nss[0], k.fin.keys[0], k.statuses[0], k.bodies[0], k.seqs[0])
	default:
		b.Queue(sqlKeysFinish, k.fin.nss, k.fin.keys, k.statuses, k.bodies, k.seqs)
	}
	switch len(k.del.keys) {
	case 0:
	case 1:
		b.Queue(sqlKeyDelete, k.del.nss[0], k.del.keys[0])
	default:
		b.Queue(sqlKeysDelete, k.del.nss, k.del.keys)
	}
}

// readKeysAndRuns reads the first round trip of keyedPipelined: BEGIN and the
// other execs statements before the keys, the keys inserted (each passed to
// keyNew) and the runs created (create's reader).
func readKeysAndRuns(br pgx.BatchResults, execs int, create stmt, keyNew func(ns, key string)) error {
	for range execs {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	rows, err := br.Query()
	if err != nil {
		return err
	}
	for rows.Next() {
		var ns, key string
		if err := rows.Scan(&ns, &key); err != nil {
			rows.Close()
			return err
		}
		keyNew(ns, key)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if rows, err = br.Query(); err != nil {
		return err
	}
	err = create.rows(rows)
	rows.Close()
	return errors.Join(err, rows.Err())
}

// readFinish reads the second round trip of keyedPipelined, n statements: the
// fingerprints of the creates seen (into their states), the keys' updates, and
// COMMIT, which must have committed.
func readFinish(br pgx.BatchResults, n int, seen []int, states []keyedState) error {
	for _, i := range seen {
		st := &states[i]
		if err := br.QueryRow().Scan(&st.fp); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
	}
	for range n - len(seen) - 1 {
		if _, err := br.Exec(); err != nil {
			return err
		}
	}
	tag, err := br.Exec()
	if err == nil && tag.String() != "COMMIT" {
		err = fmt.Errorf("the transaction did not commit (%s)", tag)
	}
	return err
}

// keyedCreates writes a batch of keyed creates in transaction tx (see
// keyedCreator). It may run again when the transaction is retried, so it
// overwrites states.
func keyedCreates(tx *wtx, reqs []*keyedReq, states []keyedState) error {
	ctx := tx.ctx
	cutoff := tx.now.Add(-store.IdempotencyTTL)
	for i := range states {
		states[i] = keyedState{}
		*reqs[i].res = nil
	}
	// 1. The keys, in one statement. A key given twice in the batch is inserted
	// once, for its first create (a statement may not update a row twice); the
	// others find it.
	var (
		nss, keys []string
		fps       [][]byte
		first     = make(map[string]int, len(reqs)) // namespace and key -> its first create
	)
	for i, r := range reqs {
		k := r.p.Namespace + "\x00" + r.p.Idempotency.Key
		if _, dup := first[k]; dup {
			continue
		}
		first[k] = i
		nss, keys, fps = append(nss, r.p.Namespace), append(keys, r.p.Idempotency.Key), append(fps, r.p.Idempotency.Fingerprint)
	}
	rows, err := tx.Query(ctx, sqlKeysInsert, nss, keys, fps, tx.now, cutoff)
	if err != nil {
		return fmt.Errorf("recording idempotency keys: %w", err)
	}
	for rows.Next() {
		var ns, key string
		if err := rows.Scan(&ns, &key); err != nil {
			rows.Close()
			return fmt.Errorf("recording idempotency keys: %w", err)
		}
		states[first[ns+"\x00"+key]].keyNew = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("recording idempotency keys: %w", err)
	}
	// 2. The runs of the new keys, and the fingerprints of the others. Each
	// queued statement has its reader.
	b := &pgx.Batch{}
	var (
		readers []func(pgx.Rows) error
		merged  []*crReq
		ids     = make(map[string]bool)
	)
	for i, r := range reqs {
		id := r.p.Namespace + "\x00" + r.p.ID
		switch {
		case !states[i].keyNew:
			b.Queue(sqlKeyFingerprint, r.p.Namespace, r.p.Idempotency.Key)
			st := &states[i]
			readers = append(readers, func(rows pgx.Rows) error {
				if rows.Next() {
					return rows.Scan(&st.fp)
				}
				return nil
			})
		case r.p.Reuse == store.ReuseRejectActive && !ids[id]:
			ids[id] = true
			merged = append(merged, r.cr)
		default:
			b.Queue(r.create.sql, r.create.args...)
			readers = append(readers, r.create.rows)
		}
	}
	if len(merged) > 0 {
		st := createsStmt(merged)
		b.Queue(st.sql, st.args...)
		readers = append(readers, st.rows)
	}
	br := tx.SendBatch(ctx, b)
	for _, read := range readers {
		rows, err := br.Query()
		if err == nil {
			err = read(rows)
			rows.Close()
			err = errors.Join(err, rows.Err())
		}
		if err != nil {
			br.Close()
			return fmt.Errorf("creating runs: %w", err)
		}
	}
	if err := br.Close(); err != nil {
		return err
	}
	// 3. The responses, or the keys of rejected starts taken back.
	var out keyResponses
	for i, r := range reqs {
		if states[i].keyNew {
			if err := out.add(r); err != nil {
				return err
			}
		}
	}
	tx.publish(out.topics...)
	b = &pgx.Batch{}
	out.queue(b)
	if b.Len() == 0 {
		return nil
	}
	return tx.SendBatch(ctx, b).Close()
}

// keyCols are idempotency keys as column arrays.
type keyCols struct{ nss, keys []string }

func (c *keyCols) add(ns, key string) { c.nss, c.keys = append(c.nss, ns), append(c.keys, key) }

// Statements of the keyed creator on idempotency_keys (as sqlstore's, which
// IdempotencyBegin and IdempotencyFinish use one key at a time).
const (
	// sqlKeysInsert returns the keys it inserted or took over (expired).
	sqlKeysInsert = `INSERT INTO idempotency_keys AS k (namespace, key, fingerprint, status, created_at)
	SELECT x.ns, x.key, x.fp, 0, $4 FROM unnest($1::text[], $2::text[], $3::bytea[]) AS x(ns, key, fp)
	` + keyTakeOver
	// keyTakeOver ends a key's insert: a key expired at $5 is taken over; the
	// keys inserted or taken over are returned.
	keyTakeOver = `ON CONFLICT (namespace, key) DO UPDATE
	SET fingerprint = excluded.fingerprint, status = 0, body = NULL, run_seq = NULL, created_at = excluded.created_at
	WHERE k.created_at <= $5
	RETURNING k.namespace, k.key`
	// sqlKeyFinish is sqlKeysFinish for one key and sqlKeyDelete
	// sqlKeysDelete: Postgres plans them in less time than those over arrays
	// (it plans every execution).
	sqlKeyFinish      = `UPDATE idempotency_keys SET status = $3, body = $4, run_seq = $5 WHERE namespace = $1 AND key = $2`
	sqlKeyFingerprint = `SELECT fingerprint FROM idempotency_keys WHERE namespace = $1 AND key = $2`
	sqlKeysFinish     = `UPDATE idempotency_keys k SET status = x.status, body = x.body, run_seq = x.seq
	FROM unnest($1::text[], $2::text[], $3::int4[], $4::bytea[], $5::int8[]) AS x(ns, key, status, body, seq)
	WHERE k.namespace = x.ns AND k.key = x.key`
	sqlKeyDelete  = `DELETE FROM idempotency_keys WHERE namespace = $1 AND key = $2`
	sqlKeysDelete = `DELETE FROM idempotency_keys k USING unnest($1::text[], $2::text[]) AS x(ns, key)
	WHERE k.namespace = x.ns AND k.key = x.key`
)
