package storesqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/trellis-dev/trellis/store"
)

// A Store can be the replica of a commit log (package store/storejs): the
// log, not the SQLite file, is then the record. While a CommitLog is attached
// (the replica of the log's writer), the writer appends each batch it applied
// to the log, as the write statements the batch ran with their arguments,
// before its transaction commits: a batch the log refuses rolls back and
// fails its requests. Without one (a follower), ApplyLog applies the batches
// the log holds, in order. Either way the replica keeps, in the same
// transaction as the batch, the log position it reached (LogPosition), so
// that a replica reopened after a crash goes on from where its file is.
//
// Replay is deterministic because a batch's statements are replayed on the
// same state in the same order: every value a statement depends on beyond the
// database (the clock, generated IDs, tokens) is one of its arguments, and no
// statement of this driver calls SQLite's own clock or random functions (the
// store/storejs rebuild tests compare every table of a replica rebuilt from
// the log with the writer's). Schema migrations are not logged: each replica
// applies them itself when it opens.

// Statement is one write statement of a logged batch, with its arguments
// converted to the driver's values (nil, int64, float64, bool, []byte,
// string, time.Time).
type Statement struct {
	Query string
	Args  []driver.Value
}

// LogBatch is one committed write batch: its statements, in order, and the
// topics its commit signals.
type LogBatch struct {
	Statements []Statement
	Topics     []string
}

// LogPosition is where a replica is in its log: the sequence of the last
// record it applied and the log's own state after it (opaque here).
type LogPosition struct {
	Seq   uint64
	State []byte
}

// CommitLog is the log a writer's replica appends its batches to.
type CommitLog interface {
	// Append makes b durable in the log and returns its position, which the
	// replica stores in the batch's transaction. An error fails the batch:
	// nothing of it commits. It is called by the writer, one batch at a time.
	Append(ctx context.Context, b *LogBatch) (LogPosition, error)
	// Committed tells the outcome of the transaction of a batch Append
	// accepted: with an error, the log holds a batch the replica does not.
	Committed(pos LogPosition, err error)
}

// ErrApplied is returned by ApplyLog for a batch at or before the position
// the replica holds: it was applied already (by this replica's own writer,
// which committed it while a follower of the same replica read it from the
// log), and nothing of it ran again.
var ErrApplied = errors.New("the replica holds this log position already")

// ErrReplica is returned by a write that a replica cannot log: one that
// commits a transaction of its own (CheckpointTx, RunCreateTx), and ApplyLog
// while a log is attached.
var ErrReplica = errors.New("not available on a replica of a commit log")

const sqlLogPositionTable = `CREATE TABLE IF NOT EXISTS log_position (
	id INTEGER PRIMARY KEY CHECK (id = 1),
	seq INTEGER NOT NULL,
	state BLOB
)`

const sqlSetLogPosition = `INSERT INTO log_position (id, seq, state) VALUES (1, ?1, ?2)
	ON CONFLICT (id) DO UPDATE SET seq = excluded.seq, state = excluded.state`

// attachedLog holds the attached CommitLog (nil l: a follower's replica,
// which refuses every write but ApplyLog); the writer reads it at the start
// of each batch.
type attachedLog struct{ l CommitLog }

// Follow makes the store a follower's replica: from now on it refuses every
// write with ErrReplica but the batches ApplyLog applies, until AttachLog.
// It also creates the table of the log position (every replica has it,
// outside the log).
func (s *Store) Follow(ctx context.Context) error {
	s.Detach()
	return s.ensureLogPosition(ctx)
}

// Detach is Follow without creating the table (it exists once Follow or
// AttachLog returned): the writer's replica becomes a follower's at once. It
// may be called from CommitLog's methods.
func (s *Store) Detach() { s.clog.Store(&attachedLog{}) }

// AttachLog makes the store the writer's replica: every write batch after it
// is appended to l before it commits, and ApplyLog is refused. Follow ends
// it; a batch the writer is applying then still goes to l.
func (s *Store) AttachLog(ctx context.Context, l CommitLog) error {
	if err := s.ensureLogPosition(ctx); err != nil {
		return err
	}
	s.clog.Store(&attachedLog{l})
	return nil
}

// SchemaVersion is the newest migration applied to the store.
func (s *Store) SchemaVersion(ctx context.Context) (uint64, error) {
	var v uint64
	if err := s.readDB.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
		return 0, fmt.Errorf("reading the schema version: %w", err)
	}
	return v, nil
}

func (s *Store) ensureLogPosition(ctx context.Context) error {
	err := s.submit(ctx, &request{ctx: ctx, done: make(chan error, 1), replay: true, apply: func(tx *wtx) error {
		_, err := tx.exec(sqlLogPositionTable)
		return err
	}})
	if err != nil {
		return fmt.Errorf("creating the log position: %w", err)
	}
	return nil
}

// LogPosition returns the position of the last batch the replica committed
// from or to its log; zero when none.
func (s *Store) LogPosition(ctx context.Context) (LogPosition, error) {
	if err := s.ensureLogPosition(ctx); err != nil {
		return LogPosition{}, err
	}
	var pos LogPosition
	err := s.readDB.QueryRowContext(ctx, `SELECT seq, state FROM log_position WHERE id = 1`).Scan(&pos.Seq, &pos.State)
	if errors.Is(err, sql.ErrNoRows) {
		return LogPosition{}, nil
	}
	if err != nil {
		return LogPosition{}, fmt.Errorf("reading the log position: %w", err)
	}
	return pos, nil
}

// ApplyLog applies a batch read from the log in one transaction with its
// position, then signals its topics. A statement that fails fails the whole
// batch: the replica no longer matches the log, and nothing of it commits.
// A batch whose position is not after the replica's is not applied again
// (ErrApplied): the check and the batch are one transaction.
func (s *Store) ApplyLog(ctx context.Context, b *LogBatch, pos LogPosition) error {
	if att := s.clog.Load(); att != nil && att.l != nil {
		return ErrReplica
	}
	r := &request{ctx: ctx, done: make(chan error, 1), replay: true}
	r.apply = func(tx *wtx) error {
		if tx.w.clog != nil {
			return ErrReplica // attached since the check above
		}
		var held int64
		switch err := tx.queryRow(`SELECT seq FROM log_position WHERE id = 1`).Scan(&held); {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return fmt.Errorf("reading the log position: %w", err)
		case uint64(held) >= pos.Seq:
			return fmt.Errorf("%w: the batch at %d, the replica at %d", ErrApplied, pos.Seq, held)
		}
		for i, st := range b.Statements {
			args := make([]any, len(st.Args))
			for j, a := range st.Args {
				args[j] = a
			}
			rows, err := tx.query(st.Query, args...)
			if err == nil {
				err = drain(rows)
			}
			if err != nil {
				return fmt.Errorf("statement %d of the batch at %d: %w", i+1, pos.Seq, err)
			}
		}
		if _, err := tx.exec(sqlSetLogPosition, int64(pos.Seq), pos.State); err != nil {
			return fmt.Errorf("recording the log position %d: %w", pos.Seq, err)
		}
		tx.publish(b.Topics...)
		return nil
	}
	return s.submit(ctx, r)
}

// drain reads a statement's rows to their end, which runs it whole.
func drain(rows rowsIter) error {
	if rows == nil {
		return nil
	}
	for rows.Next() {
	}
	err := rows.Err()
	if cerr := rows.Close(); err == nil {
		err = cerr
	}
	return err
}

// stmtLog records the write statements of the batch being applied while a
// log is attached.
type stmtLog struct{ stmts []Statement }

func (l *stmtLog) add(query string, args []any) {
	vals := make([]driver.Value, len(args))
	for i, a := range args {
		v, err := driver.DefaultParameterConverter.ConvertValue(a)
		if err != nil {
			v = a // the statement ran with it, so this cannot happen
		}
		if b, ok := v.([]byte); ok && b != nil {
			v = append(make([]byte, 0, len(b)), b...)
		}
		vals[i] = v
	}
	l.stmts = append(l.stmts, Statement{Query: query, Args: vals})
}

func (l *stmtLog) len() int {
	if l == nil {
		return 0
	}
	return len(l.stmts)
}

func (l *stmtLog) truncate(n int) {
	if l != nil {
		l.stmts = l.stmts[:n]
	}
}

// SnapshotTo writes a consistent copy of the replica to path, which must not
// exist, and returns the log position the copy holds (read from the copy: its
// log_position row is part of the same read transaction as every other row).
// The copy is made with VACUUM INTO on a connection of its own, so the writer
// goes on meanwhile; it is compact and has no WAL beside it.
func (s *Store) SnapshotTo(ctx context.Context, path string) (LogPosition, error) {
	if s.closed() {
		return LogPosition{}, fmt.Errorf("taking a snapshot: %w", store.ErrClosed)
	}
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		return LogPosition{}, fmt.Errorf("taking a snapshot: %s exists", path)
	}
	db, err := OpenDB(s.cfg.Path)
	if err != nil {
		return LogPosition{}, fmt.Errorf("taking a snapshot: %w", err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	if _, err := db.ExecContext(ctx, `VACUUM INTO ?`, path); err != nil {
		os.Remove(path)
		return LogPosition{}, fmt.Errorf("taking a snapshot: copying the replica to %s: %w", path, err)
	}
	pos, err := SnapshotPosition(ctx, path)
	if err != nil {
		os.Remove(path)
		return LogPosition{}, fmt.Errorf("taking a snapshot: %w", err)
	}
	return pos, nil
}

// SnapshotPosition reads the log position a copy of a replica (SnapshotTo)
// holds. A file that is not a SQLite database, or holds no log position, is
// an error.
func SnapshotPosition(ctx context.Context, path string) (LogPosition, error) {
	if _, err := os.Stat(path); err != nil {
		return LogPosition{}, fmt.Errorf("reading the log position of %s: %w", path, err)
	}
	db, err := OpenDB(path)
	if err != nil {
		return LogPosition{}, err
	}
	defer db.Close()
	var pos LogPosition
	err = db.QueryRowContext(ctx, `SELECT seq, state FROM log_position WHERE id = 1`).Scan(&pos.Seq, &pos.State)
	if errors.Is(err, sql.ErrNoRows) {
		return LogPosition{}, fmt.Errorf("reading the log position of %s: none recorded", path)
	}
	if err != nil {
		return LogPosition{}, fmt.Errorf("reading the log position of %s: %w", path, err)
	}
	return pos, nil
}
