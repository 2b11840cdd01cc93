package storesqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/trellis-dev/trellis/internal/batch"
	"github.com/trellis-dev/trellis/internal/sqlitedrv"
	"github.com/trellis-dev/trellis/store"
)

// request is one write call waiting for the writer.
type request struct {
	ctx   context.Context
	apply func(tx *wtx) error
	done  chan error // buffered: the writer never blocks on a caller that left

	err    error
	topics []string
	// noSync: the request may be lost in a power failure without harm (claims,
	// lease extensions); a batch of only such requests commits without fsync.
	noSync bool
	// alone, when set instead of apply, runs on the write connection outside the
	// batch transaction, after the batch it was collected with: a transaction of
	// its own (see CheckpointTx), or a read that must see what the connection
	// sees (ForeignCommitMark).
	alone func(w *writer) error
	// readOnly: alone only reads; it commits nothing (no synchronous setting,
	// not counted in Stats, no checkpointer notice).
	readOnly bool
	// fin, when set, is a checkpoint that only ends its run: a batch applies
	// its finishes together (finishMany), apply stays the way to apply it alone.
	fin *finish
	// applied: finishMany applied the request in this transaction.
	applied bool
	// replay: the request's statements are not logged (it applies a batch
	// read from the commit log, or writes what every replica writes itself).
	replay bool
}

// writer owns the write connection and commits queued requests in batches.
type writer struct {
	s        *Store
	db       *sql.DB
	conn     *sql.Conn
	raw      *rawConn // conn's driver connection; used inside conn.Raw only
	maxBatch int
	fsync    bool // durability=fsync: durable batches commit with synchronous=FULL
	syncFull bool // the connection's current synchronous setting
	// walRetryAt: a RESTART of the WAL past its limit found readers of older
	// snapshots; the next is not tried before then (boundWAL).
	walRetryAt time.Time

	reqs    chan *request // unbuffered: queued callers wait in the channel's send queue
	quit    chan struct{}
	stopped chan struct{}

	// clog and rec, during a batch while a commit log is attached: the log
	// and the write statements the batch ran (see replica.go).
	clog CommitLog
	rec  *stmtLog
}

func openWriter(ctx context.Context, s *Store, cfg Config) (*writer, error) {
	db, err := sqlitedrv.Open(dsn(cfg, false))
	if err != nil {
		return nil, fmt.Errorf("opening write connection: %w", err)
	}
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("opening write connection: %w", err)
	}
	w := &writer{
		s: s, db: db, conn: conn, raw: &rawConn{stmts: make(map[string]driver.Stmt)}, maxBatch: cfg.MaxBatch,
		fsync: cfg.Durability != DurabilityRelaxed, syncFull: cfg.Durability != DurabilityRelaxed,
		reqs: make(chan *request), quit: make(chan struct{}), stopped: make(chan struct{}),
	}
	go w.run()
	return w, nil
}

// stop ends the writer after its current batch and closes the connection.
func (w *writer) stop() error {
	close(w.quit)
	<-w.stopped
	_ = w.withRaw(func() error { return w.raw.close() })
	err := w.conn.Close()
	if dbErr := w.db.Close(); err == nil {
		err = dbErr
	}
	if err != nil {
		return fmt.Errorf("closing write connection: %w", err)
	}
	return nil
}

// write submits fn to the writer and waits for its commit. fn runs inside a
// savepoint of a batch transaction; when it fails, only its own writes roll back.
// If ctx ends first, write returns ctx's error and the request may still commit.
func (s *Store) write(ctx context.Context, fn func(tx *wtx) error) error {
	return s.submit(ctx, &request{ctx: ctx, apply: fn, done: make(chan error, 1)})
}

// writeNoSync is write for requests that need not survive a power failure: a lost
// claim or lease extension only makes a run claimable again. With durability=fsync,
// a batch holding only such requests skips the fsync; any other request in the
// batch makes it durable.
func (s *Store) writeNoSync(ctx context.Context, fn func(tx *wtx) error) error {
	return s.submit(ctx, &request{ctx: ctx, apply: fn, done: make(chan error, 1), noSync: true})
}

func (s *Store) submit(ctx context.Context, r *request) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case s.w.reqs <- r:
	case <-s.w.quit:
		return store.ErrClosed
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *writer) run() {
	defer close(w.stopped)
	batch.Run(w.reqs, w.quit, w.maxBatch, w.commitAll)
}

// commitAll commits the batch's requests that share a transaction, then each
// request that needs one of its own.
func (w *writer) commitAll(batch []*request) {
	shared := make([]*request, 0, len(batch))
	for _, r := range batch {
		if r.alone == nil {
			shared = append(shared, r)
		}
	}
	if len(shared) > 0 {
		w.commit(shared)
	}
	if len(shared) == len(batch) {
		return
	}
	for _, r := range batch {
		if r.alone != nil {
			w.commitAlone(r)
		}
	}
}

// commitAlone runs a request that commits its own, durable transaction (or only
// reads, see request.alone).
func (w *writer) commitAlone(r *request) {
	if err := r.ctx.Err(); err != nil {
		r.done <- err
		return
	}
	if err := w.withRaw(w.recoverWAL); err != nil {
		r.done <- err
		return
	}
	if r.readOnly {
		r.done <- r.alone(w)
		return
	}
	if w.s.clog.Load() != nil {
		r.done <- ErrReplica // its transaction could not be logged
		return
	}
	if err := w.withRaw(func() error { return w.setSync([]*request{r}) }); err != nil {
		r.done <- fmt.Errorf("setting synchronous: %w", err)
		return
	}
	// alone uses the connection through database/sql, outside withRaw.
	err := r.alone(w)
	if err == nil {
		w.s.transactions.Add(1)
		w.s.requests.Add(1)
		if w.s.ckpt != nil {
			w.s.ckpt.notify()
		}
	}
	r.done <- err
}

// commit applies a batch in one transaction and answers every request.
//
// Requests first run back to back without savepoints, which saves three
// statements and a statement journal per request. A request that fails with one
// of the store's own errors before writing anything (a stale lease, a taken run
// ID) leaves nothing to undo, so the batch goes on. Any other failure rolls the
// whole transaction back and replays the batch with one savepoint per request,
// so that only the failed request's writes are undone.
func (w *writer) commit(batch []*request) {
	t0 := w.s.commits.Start()
	if err := w.withRaw(func() error { w.commitBatch(batch); return nil }); err != nil {
		w.fail(batch, fmt.Errorf("using write connection: %w", err))
	}
	w.s.commits.Done(len(batch), t0)
}

// ObserveCommits implements store.CommitObserver.
func (s *Store) ObserveCommits(f func(requests int, elapsed time.Duration)) (stop func()) {
	return s.commits.Add(f)
}

// withRaw runs fn with the driver connection of conn in w.raw.
func (w *writer) withRaw(fn func() error) error {
	return w.conn.Raw(func(dc any) error {
		c, ok := dc.(driver.Conn)
		if !ok {
			return fmt.Errorf("unexpected driver connection %T", dc)
		}
		w.raw.dc = c
		defer func() { w.raw.dc = nil }()
		return fn()
	})
}

func (w *writer) commitBatch(batch []*request) {
	select {
	case <-w.quit:
		w.fail(batch, store.ErrClosed)
		return
	default:
	}
	if err := w.recoverWAL(); err != nil {
		w.fail(batch, err)
		return
	}
	if err := w.setSync(batch); err != nil {
		w.fail(batch, fmt.Errorf("setting synchronous: %w", err))
		return
	}
	w.clog, w.rec = nil, nil
	if att := w.s.clog.Load(); att != nil {
		if att.l == nil {
			batch = w.refuseWrites(batch) // a follower's replica
			if len(batch) == 0 {
				return
			}
		} else {
			w.clog, w.rec = att.l, &stmtLog{}
		}
	}
	if !w.begin(batch) {
		return
	}
	if !w.applyFast(batch) {
		if _, err := w.exec("ROLLBACK"); err != nil {
			if cause := w.rolledBack(batch, err); cause != nil {
				// SQLite undid the transaction itself: what failed the
				// request failed the batch.
				w.fail(batch, cause)
				return
			}
			w.s.log.Error("storesqlite: rolling back", "err", err)
			w.fail(batch, fmt.Errorf("rolling back: %w", err))
			return
		}
		w.s.replays.Add(1)
		if !w.begin(batch) {
			return
		}
		if w.rec != nil {
			w.rec.stmts = w.rec.stmts[:0]
		}
		for _, r := range batch {
			r.err, r.topics, r.applied = nil, nil, false
			if err := w.applyOne(r); err != nil {
				w.abort(batch, err)
				return
			}
		}
	}
	pos, logged, ok := w.appendToLog(batch)
	if !ok {
		return
	}
	_, err := w.exec("COMMIT")
	if logged {
		w.clog.Committed(pos, err)
	}
	if err != nil {
		w.abort(batch, fmt.Errorf("committing: %w", err))
		return
	}
	w.s.transactions.Add(1)
	w.s.requests.Add(int64(len(batch)))
	if w.s.ckpt != nil {
		w.s.ckpt.notify()
	}
	w.reply(batch)
	w.boundWAL()
}

// boundWAL restarts the WAL from the writer's own connection, between two
// transactions, once it has grown past Config.WALLimit (the next transaction
// starts it over, and journal_size_limit truncates the file to the limit).
// The background checkpointer used to run that RESTART; it needs the write
// lock, and a writer busy with back-to-back transactions left it too few
// gaps: in TestFullDiskReserveFinishesAcknowledgedRuns the WAL, its limit 1
// MiB, reached 8 to 13 MB, and once took the space the disk reserve kept.
// Here the lock is the writer's own, and the checkpoint waits only for the
// readers of older snapshots: at most walRestartWait, not the busy timeout,
// so that a long read (a report, a big page) stalls writes that long at most,
// and then not again for walRestartPause.
func (w *writer) boundWAL() {
	c := w.s.ckpt
	if c == nil || c.limit <= 0 || time.Now().Before(w.walRetryAt) || c.walSize() <= c.limit {
		return
	}
	if _, err := w.exec(fmt.Sprintf("PRAGMA busy_timeout = %d", walRestartWait.Milliseconds())); err != nil {
		w.s.log.Warn("storesqlite: restarting the WAL past its limit", "err", err)
		return
	}
	busy, frames, done, err := w.walCheckpoint("RESTART")
	if _, rerr := w.exec(fmt.Sprintf("PRAGMA busy_timeout = %d", busyTimeoutMS)); rerr != nil {
		err = errors.Join(err, rerr)
	}
	switch {
	case err != nil:
		w.s.log.Warn("storesqlite: restarting the WAL past its limit", "err", err)
		w.walRetryAt = time.Now().Add(walRestartPause)
	case busy != 0:
		w.s.log.Debug("storesqlite: restarting the WAL past its limit: busy", "frames", frames, "checkpointed", done)
		w.walRetryAt = time.Now().Add(walRestartPause)
	}
}

// walRestartWait is the longest the writer waits for readers of older
// snapshots to restart the WAL, and walRestartPause how long it then writes
// before it tries again.
const (
	walRestartWait  = 50 * time.Millisecond
	walRestartPause = 100 * time.Millisecond
)

func (w *writer) begin(batch []*request) bool {
	if _, err := w.exec("BEGIN IMMEDIATE"); err != nil {
		w.s.log.Error("storesqlite: beginning write transaction", "err", err)
		if diskError(err) {
			w.writeFailed()
		}
		w.fail(batch, fmt.Errorf("beginning transaction: %w", err))
		return false
	}
	return true
}

// applyFast runs the batch without savepoints. It reports false when a request
// failed in a way that may have left writes behind.
func (w *writer) applyFast(batch []*request) bool {
	if !w.finishMany(batch) {
		return false
	}
	for _, r := range batch {
		if r.applied {
			continue
		}
		if err := r.ctx.Err(); err != nil {
			r.err = err // the caller has gone; do not start its work
			continue
		}
		tx := &wtx{w: w, now: w.s.now().UTC(), norec: r.replay}
		r.err = r.apply(tx)
		if r.err == nil {
			r.topics = tx.topics
			continue
		}
		if diskError(r.err) {
			w.writeFailed()
		}
		if tx.dirty || !cleanError(r.err) {
			return false
		}
	}
	return true
}

// rolledBack returns the error of the request that failed batch when rbErr,
// the error of the ROLLBACK after it, says no transaction was open: SQLite may
// roll a whole transaction back by itself after an I/O error or a full disk in
// the middle of a statement (always, for a statement without a statement
// journal; see orFail). It returns nil otherwise.
func (w *writer) rolledBack(batch []*request, rbErr error) error {
	if !strings.Contains(rbErr.Error(), "no transaction is active") {
		return nil
	}
	for _, r := range batch {
		if r.err != nil && !cleanError(r.err) && !errors.Is(r.err, context.Canceled) &&
			!errors.Is(r.err, context.DeadlineExceeded) {
			return r.err
		}
	}
	return nil
}

// cleanError reports whether err is one the store returns after checking a
// precondition, before writing.
func cleanError(err error) bool {
	for _, e := range []error{ErrReplica, store.ErrLeaseLost, store.ErrRunExists, store.ErrRunNotFound,
		store.ErrRunFinished, store.ErrRunNotBlocked, store.ErrKeyNotFound, store.ErrInvalidParams,
		store.ErrConflict, store.ErrApprovalNotFound, store.ErrApprovalDecided} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// setSync chooses the batch's durability: with durability=fsync, synchronous=FULL
// unless every request is noSync. WAL frames are appended in order, so a later
// synced commit makes earlier unsynced ones durable too.
func (w *writer) setSync(batch []*request) error {
	if !w.fsync {
		return nil
	}
	full := false
	for _, r := range batch {
		full = full || !r.noSync
	}
	if full == w.syncFull {
		return nil
	}
	mode := "PRAGMA synchronous=NORMAL"
	if full {
		mode = "PRAGMA synchronous=FULL"
	}
	if _, err := w.raw.execScript(mode); err != nil {
		return err
	}
	w.syncFull = full
	return nil
}

// applyOne runs one request inside a savepoint. A request's own error is kept in
// r.err; the returned error means the transaction itself is broken.
func (w *writer) applyOne(r *request) error {
	if err := r.ctx.Err(); err != nil {
		r.err = err // the caller has gone; do not start its work
		return nil
	}
	if _, err := w.exec("SAVEPOINT req"); err != nil {
		return fmt.Errorf("opening savepoint: %w", err)
	}
	mark := w.rec.len()
	tx := &wtx{w: w, now: w.s.now().UTC(), norec: r.replay}
	r.err = r.apply(tx)
	if r.err == nil {
		r.topics = tx.topics
	} else {
		if diskError(r.err) {
			w.writeFailed()
		}
		if _, err := w.exec("ROLLBACK TO req"); err != nil {
			return fmt.Errorf("rolling back savepoint: %w", err)
		}
		w.rec.truncate(mark)
	}
	if _, err := w.exec("RELEASE req"); err != nil {
		return fmt.Errorf("releasing savepoint: %w", err)
	}
	return nil
}

// abort rolls the whole transaction back and fails every request.
func (w *writer) abort(batch []*request, err error) {
	w.s.log.Error("storesqlite: write transaction failed", "err", err)
	if _, rbErr := w.exec("ROLLBACK"); rbErr != nil {
		w.s.log.Error("storesqlite: rolling back", "err", rbErr)
	}
	if diskError(err) {
		w.s.reserve.Load().writeFailed(sqlitedrv.IsDiskFull(err))
		w.writeFailed()
	}
	w.fail(batch, err)
}

// recoverWAL empties the WAL before the first write after a failed one, and
// fails while it cannot: once a full disk failed a write, new writes would take
// the space that frees up, the WAL could never be copied into the database and
// every write would fail for good. No write runs until the truncation succeeds.
func (w *writer) recoverWAL() error {
	c := w.s.ckpt
	if c == nil || !c.failed.Load() {
		return nil
	}
	busy, frames, done, err := w.walCheckpoint("TRUNCATE")
	if err == nil && busy != 0 {
		err = fmt.Errorf("%d of %d WAL frames copied, readers hold the rest", done, frames)
	}
	if err != nil {
		return fmt.Errorf("truncating the WAL after a failed write: %w", err)
	}
	c.failed.Store(false)
	return nil
}

// walCheckpoint runs a WAL checkpoint of mode on the writer's connection and
// returns what SQLite reports: busy, the WAL's frames, those copied.
func (w *writer) walCheckpoint(mode string) (busy, frames, done int, err error) {
	err = (&rawRow{}).wrap(w.raw.query("PRAGMA wal_checkpoint("+mode+")", nil)).Scan(&busy, &frames, &done)
	return busy, frames, done, err
}

// writeFailed has the WAL truncated after a transaction failed: when a full disk
// failed it, the space a shorter WAL frees is what lets the next one commit.
func (w *writer) writeFailed() {
	if w.s.ckpt != nil {
		w.s.ckpt.writeFailed()
	}
}

func (w *writer) fail(batch []*request, err error) {
	for _, r := range batch {
		r.done <- err
	}
}

// reply publishes the batch's notifications, then answers its callers.
func (w *writer) reply(batch []*request) {
	var topics []string
	for _, r := range batch {
		topics = append(topics, r.topics...)
	}
	if len(topics) > 0 {
		w.s.hub.Publish(topics...)
	}
	for _, r := range batch {
		r.done <- r.err
	}
}

func (w *writer) exec(query string, args ...any) (driver.Result, error) {
	return w.raw.exec(query, args)
}

// wtx is what a request sees of the batch transaction: prepared statements on the
// write connection, the request's clock reading, and the topics to publish once
// the batch commits. dirty records that one of the request's writes may have
// changed the database (see writer.applyFast).
type wtx struct {
	w      *writer
	now    time.Time
	topics []string
	dirty  bool
	// ext, when set, is a caller's transaction (RunCreateTx) that runs the
	// statements instead of the write connection, with ctx.
	ext *sql.Tx
	ctx context.Context
	// norec: the request's statements are not logged (request.replay).
	norec bool
}

// record logs a write statement that ran, while a commit log is attached.
func (tx *wtx) record(query string, args []any) {
	if tx.w.rec != nil && !tx.norec && tx.ext == nil {
		tx.w.rec.add(query, args)
	}
}

func (tx *wtx) publish(topics ...string) { tx.topics = append(tx.topics, topics...) }

// isRead reports whether query only reads. Every statement this package runs
// starts with its verb.
func isRead(query string) bool { return strings.HasPrefix(query, "SELECT") }

// ExecContext runs a prepared statement. ctx is ignored: a started request is not
// interrupted (its caller may leave; the batch goes on).
func (tx *wtx) ExecContext(_ context.Context, query string, args ...any) (driver.Result, error) {
	return tx.exec(query, args...)
}

// QueryContext runs a prepared query; see ExecContext about ctx.
func (tx *wtx) QueryContext(_ context.Context, query string, args ...any) (rowsIter, error) {
	return tx.query(query, args...)
}

// QueryRowContext runs a prepared single-row query; see ExecContext about ctx.
func (tx *wtx) QueryRowContext(_ context.Context, query string, args ...any) scanner {
	if isRead(query) {
		return tx.row(query, args...)
	}
	tx.dirty = true
	return loggedRow{tx.row(query, args...), tx, query, args}
}

// loggedRow is the row of a write run through QueryRowContext: the write is
// logged once its row scans (one that matched nothing changed nothing).
type loggedRow struct {
	row   scanner
	tx    *wtx
	query string
	args  []any
}

func (r loggedRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	if err == nil {
		r.tx.record(r.query, r.args)
	}
	return err
}

func (tx *wtx) row(query string, args ...any) scanner {
	if tx.ext != nil {
		return tx.ext.QueryRowContext(tx.ctx, query, args...)
	}
	rows, err := tx.w.raw.query(query, args)
	return &rawRow{rows: rows, err: err}
}

// execRaw runs SQL without preparing it (it may hold several statements), or
// with arguments as one prepared statement; for migrations.
func (tx *wtx) execRaw(query string, args ...any) (driver.Result, error) {
	tx.dirty = true
	if len(args) > 0 {
		return tx.w.raw.exec(query, args)
	}
	return tx.w.raw.execScript(query)
}

// queryRow runs a single-row query. A write's row counts as written only when it
// scans: a statement that fails or matches nothing leaves no change behind.
func (tx *wtx) queryRow(query string, args ...any) scanner {
	if isRead(query) {
		return tx.row(query, args...)
	}
	return writeRow{tx.row(query, args...), tx, query, args}
}

type writeRow struct {
	row   scanner
	tx    *wtx
	query string
	args  []any
}

func (r writeRow) Scan(dest ...any) error {
	err := r.row.Scan(dest...)
	r.tx.dirty = r.tx.dirty || err == nil
	if err == nil {
		r.tx.record(r.query, r.args)
	}
	return err
}

// query runs a prepared query.
func (tx *wtx) query(query string, args ...any) (rowsIter, error) {
	read := isRead(query)
	tx.dirty = tx.dirty || !read
	if tx.ext != nil {
		return tx.ext.QueryContext(tx.ctx, query, args...)
	}
	rows, err := tx.w.raw.query(query, args)
	if err == nil && !read {
		tx.record(query, args)
	}
	return rows, err
}

// exec runs a prepared statement; a statement that fails changes nothing.
func (tx *wtx) exec(query string, args ...any) (driver.Result, error) {
	if tx.ext != nil {
		return tx.ext.ExecContext(tx.ctx, query, args...)
	}
	res, err := tx.w.exec(query, args...)
	tx.dirty = tx.dirty || err == nil
	if err == nil {
		tx.record(query, args)
	}
	return res, err
}

// appendToLog appends the batch to the attached commit log, if any, and
// records the position it got in the transaction; logged reports whether it
// appended. On failure it rolls the transaction back, fails the batch and
// reports !ok.
func (w *writer) appendToLog(batch []*request) (pos LogPosition, logged, ok bool) {
	if w.rec == nil || len(w.rec.stmts) == 0 {
		return LogPosition{}, false, true // nothing to log, or nothing changed
	}
	var topics []string
	for _, r := range batch {
		if r.err == nil {
			topics = append(topics, r.topics...)
		}
	}
	pos, err := w.clog.Append(context.Background(), &LogBatch{Statements: w.rec.stmts, Topics: topics})
	w.rec = nil
	if err == nil {
		if _, err = w.exec(sqlSetLogPosition, int64(pos.Seq), pos.State); err != nil {
			w.clog.Committed(pos, err)
		}
	}
	if err != nil {
		if _, rbErr := w.exec("ROLLBACK"); rbErr != nil {
			w.s.log.Error("storesqlite: rolling back", "err", rbErr)
		}
		w.fail(batch, err)
		return LogPosition{}, false, false
	}
	return pos, true, true
}

// refuseWrites answers ErrReplica to the batch's requests that are not
// replays (a follower's replica takes no writes of its own) and returns the
// others.
func (w *writer) refuseWrites(batch []*request) []*request {
	kept := batch[:0:0]
	for _, r := range batch {
		if r.replay {
			kept = append(kept, r)
		} else {
			r.done <- ErrReplica
		}
	}
	return kept
}
