package storepg

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/trellis-dev/trellis/internal/batch"
	"github.com/trellis-dev/trellis/store"
)

// stmt is one SQL statement of a write request.
type stmt struct {
	sql  string
	args []any
	// rows, when set, reads the statement's rows (it may be called again if the
	// batch is retried, so it must overwrite, not append to, what it fills). An
	// error it returns fails the request but not the batch.
	rows func(pgx.Rows) error
	// tag, when set, inspects the command tag; its error fails the request.
	tag func(pgconn.CommandTag) error
	// generic: the statement's generic plan is its custom plan, whatever the
	// tables hold when it is made (TestGenericPlans): it reads runs, queues
	// and idempotency_keys only through a unique index that its parameters
	// match in full, and no partial index's condition follows from its own.
	// A batch of only such statements is executed with the plan each
	// connection makes once (sqlGenericPlans), not planned at every execution.
	generic bool
}

// request is one write call waiting for a writer.
type request struct {
	ctx   context.Context
	stmts []stmt
	// ck, when set instead of stmts, is a checkpoint: the writer merges the
	// checkpoints of a batch into one statement.
	ck *ckReq
	// cr, when set instead of stmts, is a plain run create: the writer merges
	// the creates of a batch into one statement (see sqlRunCreates).
	cr *crReq
	// topics are published (NOTIFY to every store, and locally) when the batch
	// commits. Topics known only from a statement's result are published by the
	// statement itself (pg_notify in SQL) and by the caller locally.
	topics []string
	done   chan error // buffered: a writer never blocks on a caller that left
	// noSync: the request may be lost in a crash without harm (claims, lease
	// extensions); a batch of only such requests commits without waiting for the
	// WAL flush (synchronous_commit off). Any other request makes the batch durable,
	// and a durable commit also makes every earlier commit durable.
	noSync bool

	err error
}

// writer commits queued requests in batches: each batch is one pipelined round trip
// and one implicit transaction (pgx sends a batch with a single Sync).
type writer struct {
	s        *Store
	reqs     chan *request // unbuffered: queued callers wait in the channel's send queue
	quit     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

func startWriter(s *Store) *writer {
	w := &writer{s: s, reqs: make(chan *request), quit: make(chan struct{})}
	for range s.cfg.Writers {
		w.wg.Go(w.run)
	}
	return w
}

// stop ends the writers after their current batch.
func (w *writer) stop() {
	w.stopOnce.Do(func() { close(w.quit) })
	w.wg.Wait()
}

// write submits a request of statements and waits for its commit. If ctx ends
// first, write returns ctx's error and the request may still commit.
func (s *Store) write(ctx context.Context, topics []string, stmts ...stmt) (*request, error) {
	return s.submit(ctx, &request{ctx: ctx, stmts: stmts, topics: topics, done: make(chan error, 1)})
}

// writeNoSync is write for a request whose loss in a crash is harmless: a lost claim
// or lease extension only makes a run claimable again (lease tokens stay above the
// clock, so a token is never issued twice).
func (s *Store) writeNoSync(ctx context.Context, stmts ...stmt) (*request, error) {
	return s.submit(ctx, &request{ctx: ctx, stmts: stmts, done: make(chan error, 1), noSync: true})
}

// claimWrite is writeNoSync for claims. A claim does not queue behind the
// group-commit writers: a batch that holds a checkpoint waits for its WAL flush, and
// a claim that joined it would wait too while the worker's slots stand empty. It
// commits on a pooled connection of its own instead, in its caller's goroutine, with
// the writers' retries. (It locks only pending and lapsed rows, with SKIP LOCKED, so
// it never waits for a checkpoint. A lease extension's first pass, which skips the
// running rows others hold, stays in the writers' queue; its second pass, which
// waits for those rows, commits here, holding nothing else: see sqlExtend.)
func (s *Store) claimWrite(ctx context.Context, stmts ...stmt) (*request, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case <-s.w.quit:
		return nil, store.ErrClosed
	default:
	}
	r := &request{ctx: ctx, stmts: stmts, done: make(chan error, 1), noSync: true}
	s.w.commit([]*request{r})
	return r, <-r.done
}

func (s *Store) submit(ctx context.Context, r *request) (*request, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	select {
	case s.w.reqs <- r:
	case <-s.w.quit:
		return nil, store.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	select {
	case err := <-r.done:
		return r, err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (w *writer) run() { batch.Run(w.reqs, w.quit, w.s.cfg.MaxBatch, w.commit) }

// ObserveCommits implements store.CommitObserver.
func (s *Store) ObserveCommits(f func(requests int, elapsed time.Duration)) (stop func()) {
	return s.commits.Add(f)
}

// maxDeadlockRetries bounds the retries of a batch aborted by a deadlock or a
// serialization failure (another transaction's fault, not a request's).
const maxDeadlockRetries = 5

// commit commits a batch and answers every request. A request whose statement fails
// is answered with its error and the batch is retried without it; a batch failing as
// a whole (lost connection) fails every request.
func (w *writer) commit(batch []*request) {
	defer w.s.commits.Done(len(batch), w.s.commits.Start())
	live := make([]*request, 0, len(batch))
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.done <- err // the caller has gone; do not start its work
			continue
		}
		live = append(live, r)
	}
	retries := 0
	var reconnect backoff
	for len(live) > 0 {
		select {
		case <-w.quit:
			w.fail(live, store.ErrClosed)
			return
		default:
		}
		failed, err := w.exec(live)
		switch {
		case err == nil:
			w.reply(live)
			return
		case isRetryable(err) && retries < maxDeadlockRetries:
			retries++
		case connRetryable(err) && reconnect.wait(w.quit, nil):
			// The batch surely did not commit (the connection was dead before it ran,
			// or the server refused it while restarting): send it again.
			live = w.dropGone(live)
		case failed >= 0:
			live[failed].done <- err
			live = append(live[:failed], live[failed+1:]...)
		case len(live) > 1 && !errors.As(err, new(*connLostError)):
			// Failed for a reason no statement owns (e.g. preparing): commit each
			// request on its own so only the faulty one fails.
			for _, r := range live {
				w.commit([]*request{r})
			}
			return
		default:
			w.s.log.Error("storepg: write transaction failed", "err", err, "requests", len(live))
			w.fail(live, err)
			return
		}
	}
}

// dropGone answers the requests whose caller has left and returns the others.
func (w *writer) dropGone(batch []*request) []*request {
	live := batch[:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.done <- err
			continue
		}
		live = append(live, r)
	}
	return live
}

// exec runs a batch in one round trip. On error it returns the index of the request
// whose statement failed, or -1 when no request is to blame.
func (w *writer) exec(batch []*request) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), w.s.cfg.WriteTimeout)
	defer cancel()
	conn, err := w.s.pool.Acquire(ctx)
	if err != nil {
		return -1, &connLostError{fmt.Errorf("acquiring a connection: %w", err)}
	}
	defer conn.Release()
	b := &pgx.Batch{}
	units := w.batchUnits(batch)
	settings := batchSettings(batch, units)
	for _, set := range settings {
		b.Queue(set)
	}
	for _, u := range units {
		b.Queue(u.st.sql, u.st.args...)
	}
	if payloads := w.s.payloads(batch); len(payloads) > 0 {
		b.Queue(sqlNotify, w.s.channel, payloads)
	}
	br := conn.SendBatch(ctx, b)
	failed, err := -1, error(nil)
	for range settings {
		if _, err = br.Exec(); err != nil {
			break
		}
	}
	if err == nil {
		failed, err = readResults(br, batch, units)
	}
	if cerr := br.Close(); err == nil && cerr != nil {
		failed, err = -1, cerr
	}
	if err != nil {
		if conn.Conn().IsClosed() {
			return -1, &connLostError{err}
		}
		return failed, err
	}
	return -1, nil
}

// batchSettings are the statements that set the transaction of a batch of
// requests laid out as units, sent first: without waiting for the WAL flush
// when no request needs it, on generic plans when every statement may use one.
func batchSettings(batch []*request, units []unit) []string {
	var settings []string
	lazy, generic := true, len(units) > 0
	for _, r := range batch {
		lazy = lazy && r.noSync
	}
	for _, u := range units {
		generic = generic && u.st.generic
	}
	if lazy {
		settings = append(settings, sqlAsyncCommit)
	}
	if generic {
		settings = append(settings, sqlGenericPlans)
	}
	return settings
}

// sqlAsyncCommit makes the batch's transaction commit without waiting for its WAL
// to reach disk.
const sqlAsyncCommit = `SELECT set_config('synchronous_commit', 'off', true)`

// sqlGenericPlans has the statements after it in the transaction executed with
// their generic plans (see stmt.generic). The store's connections otherwise
// plan every execution (plan_cache_mode, poolConfig): with w3's batches of one
// create or one checkpoint, planning was about a third of a run's time on
// Postgres (docs/benchmarks.md).
const sqlGenericPlans = `SELECT set_config('plan_cache_mode', 'force_generic_plan', true)`

// unit is one statement of a batch and the requests it serves (by index in the
// batch).
type unit struct {
	st   stmt
	reqs []int
}

// batchUnits lays out a batch's statements: one for all its checkpoints (a second
// checkpoint of the same run, possible only when a caller gave up on the first,
// gets a statement of its own: one statement may not update a row twice), then
// each other request's statements in order.
func (w *writer) batchUnits(batch []*request) []unit {
	var (
		cks   []*ckReq
		ckIdx []int
		crs   []*crReq
		crIdx []int
		out   = make([]unit, 1, len(batch)+1)
		seen  = make(map[store.Lease]bool)
		seenC = make(map[store.Lease]bool)
	)
	for i, r := range batch {
		if r.cr != nil {
			run := store.Lease{Namespace: r.cr.p.Namespace, RunID: r.cr.p.ID}
			if seenC[run] { // the same run ID twice: rows come back by ID
				out = append(out, unit{st: r.cr.single, reqs: []int{i}})
				continue
			}
			seenC[run] = true
			crs, crIdx = append(crs, r.cr), append(crIdx, i)
			continue
		}
		if r.ck == nil {
			for _, st := range r.stmts {
				out = append(out, unit{st: st, reqs: []int{i}})
			}
			continue
		}
		run := store.Lease{Namespace: r.ck.p.Lease.Namespace, RunID: r.ck.p.Lease.RunID}
		if seen[run] {
			out = append(out, unit{st: checkpointsStmt([]*ckReq{r.ck}, w.s.mergeSingle), reqs: []int{i}})
			continue
		}
		seen[run] = true
		cks, ckIdx = append(cks, r.ck), append(ckIdx, i)
	}
	switch {
	case len(crs) == 1:
		out = append(out, unit{st: crs[0].single, reqs: crIdx})
	case len(crs) > 1:
		out = append(out, unit{st: createsStmt(crs), reqs: crIdx})
	}
	if len(cks) == 0 {
		return out[1:]
	}
	out[0] = unit{st: checkpointsStmt(cks, w.s.mergeSingle), reqs: ckIdx}
	return out
}

// readResults reads every statement's result in order, stopping at the first error.
// It returns the index of the request to blame for the error, or -1 when the
// failed statement served several requests.
func readResults(br pgx.BatchResults, batch []*request, units []unit) (int, error) {
	for _, r := range batch {
		r.err = nil
	}
	for _, u := range units {
		if err := readResult(br, batch, u); err != nil {
			if len(u.reqs) == 1 {
				return u.reqs[0], err
			}
			return -1, err
		}
	}
	return -1, nil
}

// readResult reads one statement's result. A reader's own error is kept as the
// error of the requests the statement serves; the returned error is the
// statement's (it aborted the transaction).
func readResult(br pgx.BatchResults, batch []*request, u unit) error {
	rows, err := br.Query()
	if err != nil {
		return err
	}
	var readErr error
	if u.st.rows != nil {
		readErr = u.st.rows(rows)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	if readErr == nil && u.st.tag != nil {
		readErr = u.st.tag(rows.CommandTag())
	}
	if readErr != nil {
		for _, i := range u.reqs {
			if batch[i].err == nil {
				batch[i].err = readErr
			}
		}
	}
	return nil
}

func (w *writer) fail(batch []*request, err error) {
	for _, r := range batch {
		r.done <- err
	}
}

// reply publishes the committed batch's topics locally, then answers its callers.
func (w *writer) reply(batch []*request) {
	w.s.transactions.Add(1)
	w.s.requests.Add(int64(len(batch)))
	var topics []string
	for _, r := range batch {
		if r.err == nil {
			topics = append(topics, r.topics...)
		}
	}
	if len(topics) > 0 {
		w.s.hub.Publish(topics...)
	}
	for _, r := range batch {
		r.done <- r.err
	}
}

// maxPayload is the longest NOTIFY payload sent (Postgres' limit is 8000 bytes).
const maxPayload = 7900

// payloads returns the batch's distinct topics as NOTIFY payloads: the sender's ID,
// then one topic per line, split so that no payload exceeds maxPayload.
func (s *Store) payloads(batch []*request) []string {
	var (
		out  []string
		b    strings.Builder
		seen map[string]bool
	)
	for _, r := range batch {
		for _, t := range r.topics {
			if seen[t] {
				continue
			}
			if seen == nil {
				seen = make(map[string]bool)
			}
			seen[t] = true
			if b.Len() > 0 && b.Len()+1+len(t) > maxPayload {
				out = append(out, b.String())
				b.Reset()
			}
			if b.Len() == 0 {
				b.WriteString(s.id)
			}
			if len(s.id)+1+len(t) > maxPayload {
				t = topicAll // cannot be sent: wake everyone instead
			}
			b.WriteByte('\n')
			b.WriteString(t)
		}
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out
}

// isRetryable reports a deadlock or serialization failure: the batch did nothing
// wrong and may simply run again.
func isRetryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// connLostError is a batch's failure for want of a working connection: no request
// is to blame, and whether the batch committed is unknown.
type connLostError struct{ err error }

func (e *connLostError) Error() string { return "database connection lost: " + e.err.Error() }
func (e *connLostError) Unwrap() error { return e.err }
