package storesqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

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
}

// writer owns the write connection and commits queued requests in batches.
type writer struct {
	s        *Store
	db       *sql.DB
	conn     *sql.Conn
	stmts    map[string]*sql.Stmt
	maxBatch int
	fsync    bool // durability=fsync: durable batches commit with synchronous=FULL
	syncFull bool // the connection's current synchronous setting

	reqs    chan *request // unbuffered: queued callers wait in the channel's send queue
	quit    chan struct{}
	stopped chan struct{}
}

func openWriter(ctx context.Context, s *Store, cfg Config) (*writer, error) {
	db, err := sql.Open("sqlite", dsn(cfg, false))
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
		s: s, db: db, conn: conn, stmts: make(map[string]*sql.Stmt), maxBatch: cfg.MaxBatch,
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
	for _, st := range w.stmts {
		_ = st.Close()
	}
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
	batch := make([]*request, 0, w.maxBatch)
	for {
		select {
		case r := <-w.reqs:
			batch = w.collect(append(batch[:0], r))
			w.commit(batch)
			clear(batch)
		case <-w.quit:
			return
		}
	}
}

// collect adds the requests already waiting, up to maxBatch.
func (w *writer) collect(batch []*request) []*request {
	for len(batch) < w.maxBatch {
		select {
		case r := <-w.reqs:
			batch = append(batch, r)
		default:
			return batch
		}
	}
	return batch
}

// commit applies a batch in one transaction and answers every request.
func (w *writer) commit(batch []*request) {
	select {
	case <-w.quit:
		w.fail(batch, store.ErrClosed)
		return
	default:
	}
	if err := w.setSync(batch); err != nil {
		w.fail(batch, fmt.Errorf("setting synchronous: %w", err))
		return
	}
	if _, err := w.exec("BEGIN IMMEDIATE"); err != nil {
		w.s.log.Error("storesqlite: beginning write transaction", "err", err)
		w.fail(batch, fmt.Errorf("beginning transaction: %w", err))
		return
	}
	for _, r := range batch {
		if err := w.applyOne(r); err != nil {
			w.abort(batch, err)
			return
		}
	}
	if _, err := w.exec("COMMIT"); err != nil {
		w.abort(batch, fmt.Errorf("committing: %w", err))
		return
	}
	w.s.transactions.Add(1)
	w.s.requests.Add(int64(len(batch)))
	if w.s.ckpt != nil {
		w.s.ckpt.notify()
	}
	w.reply(batch)
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
	if _, err := w.conn.ExecContext(context.Background(), mode); err != nil {
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
	tx := &wtx{w: w, now: w.s.now().UTC()}
	r.err = r.apply(tx)
	if r.err == nil {
		r.topics = tx.topics
	} else if _, err := w.exec("ROLLBACK TO req"); err != nil {
		return fmt.Errorf("rolling back savepoint: %w", err)
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
	w.fail(batch, err)
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

// stmt returns the prepared statement of query, preparing it once.
func (w *writer) stmt(query string) (*sql.Stmt, error) {
	if st, ok := w.stmts[query]; ok {
		return st, nil
	}
	st, err := w.conn.PrepareContext(context.Background(), query)
	if err != nil {
		return nil, err
	}
	w.stmts[query] = st
	return st, nil
}

func (w *writer) exec(query string, args ...any) (sql.Result, error) {
	st, err := w.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.Exec(args...)
}

// wtx is what a request sees of the batch transaction: prepared statements on the
// write connection, the request's clock reading, and the topics to publish once
// the batch commits.
type wtx struct {
	w      *writer
	now    time.Time
	topics []string
}

func (tx *wtx) publish(topics ...string) { tx.topics = append(tx.topics, topics...) }

// ExecContext runs a prepared statement. ctx is ignored: a started request is not
// interrupted (its caller may leave; the batch goes on).
func (tx *wtx) ExecContext(_ context.Context, query string, args ...any) (sql.Result, error) {
	return tx.w.exec(query, args...)
}

// QueryContext runs a prepared query; see ExecContext about ctx.
func (tx *wtx) QueryContext(_ context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := tx.w.stmt(query)
	if err != nil {
		return nil, err
	}
	return st.Query(args...)
}

// QueryRowContext runs a prepared single-row query; see ExecContext about ctx.
func (tx *wtx) QueryRowContext(_ context.Context, query string, args ...any) *sql.Row {
	st, err := tx.w.stmt(query)
	if err != nil {
		// Let database/sql carry the preparation error in the Row.
		return tx.w.conn.QueryRowContext(context.Background(), query, args...)
	}
	return st.QueryRow(args...)
}

// execRaw runs SQL without preparing it (it may hold several statements); for
// migrations.
func (tx *wtx) execRaw(query string, args ...any) (sql.Result, error) {
	return tx.w.conn.ExecContext(context.Background(), query, args...)
}

// queryRow is QueryRowContext without a context.
func (tx *wtx) queryRow(query string, args ...any) *sql.Row {
	return tx.QueryRowContext(context.Background(), query, args...)
}

// query is QueryContext without a context.
func (tx *wtx) query(query string, args ...any) (*sql.Rows, error) {
	return tx.QueryContext(context.Background(), query, args...)
}

// exec runs a prepared statement.
func (tx *wtx) exec(query string, args ...any) (sql.Result, error) {
	return tx.w.exec(query, args...)
}
