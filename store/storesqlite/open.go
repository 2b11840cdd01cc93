package storesqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trellis-dev/trellis/internal/notify"
	"github.com/trellis-dev/trellis/internal/sqlitedrv"
	"github.com/trellis-dev/trellis/store"
	"github.com/trellis-dev/trellis/store/internal/sqlstore"
)

// busyTimeoutMS is how long a connection waits for a lock held by another process
// (e.g. a second Open of the same file) before failing with SQLITE_BUSY.
const busyTimeoutMS = 10000

// Store is a store.Store on a SQLite file. Create it with Open.
//
// Most methods of store.Store and of its optional interfaces are the ones the
// SQL drivers share (package store/internal/sqlstore), which go doc does not
// list here; those below are this driver's own.
type Store struct {
	cfg    Config
	now    func() time.Time
	log    *slog.Logger
	hub    notify.Hub
	readDB *sql.DB
	reads  *reader // prepared statements on readDB
	w      *writer
	ckpt   *walCheckpointer
	// reserve is the disk reserve of running runs (nil: none). Set by Open
	// once the checkpointer, which looks at it, runs.
	reserve atomic.Pointer[diskReserve]

	closeOnce sync.Once
	closeErr  error

	transactions atomic.Int64
	requests     atomic.Int64
	commits      sqlstore.CommitObserver
	replays      atomic.Int64

	mark commitMark // ForeignCommitMark's last reading

	// clog is the commit log the writer appends batches to (nil: none; see
	// replica.go).
	clog atomic.Pointer[attachedLog]

	// methods are the store methods the SQL drivers share (seam.go), bound
	// to this store by Open.
	methods
}

// commitMark is the last reading of ForeignCommitMark, shared by its callers
// (every idle stream of a server polls it): reading it again within
// markReuse gives the same value. mu also makes concurrent callers share one
// reading.
type commitMark struct {
	mu    sync.Mutex
	value int64
	at    time.Time     // monotonic; zero: never read
	reuse time.Duration // zero: markReuse (tests set it)
}

// markReuse is how long a reading of the foreign commit mark is handed out
// again. A caller compares marks to decide whether to read what the mark
// guards; any mark read before that read is a sound reference, so an older
// reading only makes a later change seen one poll later.
const markReuse = 100 * time.Millisecond

var _ store.Store = (*Store)(nil)

// Stats counts the writer's work since Open.
type Stats struct {
	// Transactions is the number of write transactions committed.
	Transactions int64
	// Requests is the number of write requests those transactions carried.
	Requests int64
	// Replays is the number of batches replayed with a savepoint per request
	// because a request failed after writing.
	Replays int64
}

// Open opens (creating if needed) the database at cfg.Path, applies pending
// migrations and starts the writer. With cfg.NoMigrate it opens an existing,
// migrated store only.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("opening sqlite store: %w: %w", store.ErrInvalidParams, err)
	}
	if cfg.NoMigrate {
		// Checked first: opening a connection would create the file.
		if _, err := os.Stat(cfg.Path); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("opening sqlite store: %w at %s (trellis migrate creates one)", store.ErrNoStore, cfg.Path)
		}
	}
	obj, err := sqlstore.OpenObjectBlobs(ctx, cfg.Blobs)
	if err != nil {
		return nil, fmt.Errorf("opening sqlite store: payloads stored apart: %w", err)
	}
	s := &Store{cfg: cfg, now: cfg.Now, log: cfg.Logger}
	sqlstore.Bind(&s.methods, sqlstore.Binding{SQL: shared, Driver: seam{s}, Own: seam{s}, Workers: s,
		Log: s.log, Name: "storesqlite"})
	if s.ckpt, err = startWALCheckpointer(s, cfg); err != nil {
		return nil, fmt.Errorf("opening sqlite store: %w", err)
	}
	if s.w, err = openWriter(ctx, s, cfg); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("opening sqlite store: %w", err)
	}
	if s.readDB, err = openReadDB(cfg); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("opening sqlite store: %w", err)
	}
	s.reads = newReader(s.readDB)
	migrate := s.Migrate
	if cfg.NoMigrate {
		migrate = s.requireMigrated
	}
	if err := migrate(ctx); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("opening sqlite store: %w", err)
	}
	sqlstore.OpenBlobs(&s.methods, obj, cfg.BlobThreshold)
	if n := min(cfg.WALPreallocate, cfg.WALLimit); n > 0 && !cfg.NoMigrate {
		if err := s.preallocateWAL(ctx, n); err != nil {
			s.log.Warn("storesqlite: preallocating the WAL", "bytes", n, "err", err)
		}
	}
	// After the WAL's preallocation: one that fills the volume for a moment
	// (and is cut back) must not look like a full disk.
	s.reserve.Store(openDiskReserve(s, cfg))
	return s, nil
}

// writerCacheKiB is the writer connection's page cache: SQLite's default is 2
// MiB, and past it a write that touches an index page the cache dropped reads it
// back first (a system call, and the WAL's frame lookup). The cache fills with
// every page the writer touches and keeps them until the connection closes, so
// it is memory the process holds however many runs merely wait. In the default
// build each cached page costs about 9 KB, not 4 (modernc.org/memory puts the
// page and its header, about 4.3 KB, in an 8 KiB slot): 4 MiB of cache is about
// 9 MB resident. It was 64 MiB: w4 (runs that sleep an hour) grew the process by
// 18 MB for 10,000 runs and 128 MB for 100,000, while w1 at n = 20,000 ran no
// faster than with 4 MiB (docs/benchmarks.md, w4).
const writerCacheKiB = 4 << 10

// dsn is the driver's connection string. The write connection keeps its
// temporary files in memory (temp_store=MEMORY): the statement journals of a
// batch's multi-row statements (see orFail) otherwise spill to a temporary
// file after 64 KiB, and every page they save costs a system call.
func dsn(cfg Config, readOnly bool) string {
	sync := "FULL"
	if cfg.Durability == DurabilityRelaxed {
		sync = "NORMAL"
	}
	d := fmt.Sprintf("%s?_pragma=busy_timeout(%d)&_pragma=journal_mode(WAL)&_pragma=synchronous(%s)",
		cfg.Path, busyTimeoutMS, sync)
	if readOnly {
		d += "&_pragma=query_only(1)"
	} else {
		d += fmt.Sprintf("&_pragma=wal_autocheckpoint(%d)&_pragma=journal_size_limit(%d)&_pragma=cache_size(%d)&_pragma=temp_store(2)",
			walAutoCheckpointPages, cfg.WALLimit, -writerCacheKiB)
	}
	return d
}

// OpenDB opens the SQLite file at path for an application's own use (its own
// tables; the *sql.Tx of a transactional start, see store.TxStarter) with the
// SQLite library the store uses in this build: modernc.org/sqlite, or
// github.com/mattn/go-sqlite3 in a build with the tag trellis_cgo. Connections
// wait for locks up to 10 s, as the store's do. A process must link one SQLite
// library: two copies that open the same file in one process can corrupt it (each
// keeps its own record of the file's POSIX locks).
func OpenDB(path string) (*sql.DB, error) {
	db, err := sqlitedrv.Open(fmt.Sprintf("%s?_pragma=busy_timeout(%d)", path, busyTimeoutMS))
	if err != nil {
		return nil, fmt.Errorf("opening %s: %w", path, err)
	}
	return db, nil
}

func openReadDB(cfg Config) (*sql.DB, error) {
	db, err := sqlitedrv.Open(dsn(cfg, true))
	if err != nil {
		return nil, fmt.Errorf("opening read pool: %w", err)
	}
	n := max(4, runtime.GOMAXPROCS(0)*2)
	db.SetMaxOpenConns(n)
	db.SetMaxIdleConns(n)
	return db, nil
}

// Stats returns counters of the writer's work (group commit efficiency is
// Requests/Transactions).
func (s *Store) Stats() Stats {
	return Stats{Transactions: s.transactions.Load(), Requests: s.requests.Load(), Replays: s.replays.Load()}
}

// Subscribe implements store.Store. Signals come from this store's own commits;
// another process's commits reach it by polling only.
func (s *Store) Subscribe(ctx context.Context, topic string) (<-chan struct{}, func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("subscribing: %w", err)
	}
	if s.closed() {
		return nil, nil, fmt.Errorf("subscribing: %w", store.ErrClosed)
	}
	ch, stop := s.hub.SubscribeContext(ctx, topic)
	return ch, stop, nil
}

// WatchRuns implements store.RunWatcher. The feed carries this store's own
// commits only: other processes' are seen by reading.
func (s *Store) WatchRuns(namespace string) (store.RunFeed, bool) {
	return s.hub.Feed(store.RunTopicPrefix(namespace)), false
}

// ForeignCommitMark implements store.ForeignCommits: the write connection's
// PRAGMA data_version, which SQLite changes when another connection commits to
// the file and never for the connection's own commits. Every write of this Store
// goes through that connection and its read pool never writes, so the mark
// changes only for other processes' commits, another Store's on the same file,
// a caller's transaction (RunCreateTx) or a checkpoint that restarts the WAL.
//
// A reading is handed out again for markReuse (see commitMark), so that many
// pollers cost one write-connection request per markReuse between them.
func (s *Store) ForeignCommitMark(ctx context.Context) (int64, error) {
	s.mark.mu.Lock()
	defer s.mark.mu.Unlock()
	reuse := s.mark.reuse
	if reuse == 0 {
		reuse = markReuse
	}
	if !s.mark.at.IsZero() && time.Since(s.mark.at) < reuse {
		return s.mark.value, nil
	}
	at := time.Now() // before the reading: its age is never understated
	// Read on the write connection between batches, outside a transaction: no
	// write lock is taken, so a busy writer in another process holds it up no
	// longer than a read.
	var mark int64
	err := s.submit(ctx, &request{ctx: ctx, done: make(chan error, 1), readOnly: true, alone: func(w *writer) error {
		return w.conn.QueryRowContext(ctx, "PRAGMA data_version").Scan(&mark)
	}})
	if err != nil {
		return 0, fmt.Errorf("reading the commit mark: %w", err)
	}
	s.mark.value, s.mark.at = mark, at
	return mark, nil
}

// Close stops the writer (pending requests fail with store.ErrClosed) and closes
// the database. It is idempotent.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		if s.w != nil {
			s.closeErr = s.w.stop()
		}
		if s.ckpt != nil {
			if err := s.ckpt.stop(); err != nil && s.closeErr == nil {
				s.closeErr = err
			}
		}
		if err := sqlstore.CloseBlobs(&s.methods); err != nil && s.closeErr == nil {
			s.closeErr = err
		}
		if s.reads != nil {
			s.reads.close()
		}
		if s.readDB != nil {
			if err := s.readDB.Close(); err != nil && s.closeErr == nil {
				s.closeErr = fmt.Errorf("closing read pool: %w", err)
			}
		}
	})
	return s.closeErr
}

// closed reports whether Close was called.
func (s *Store) closed() bool {
	if s.w == nil {
		return true
	}
	select {
	case <-s.w.quit:
		return true
	default:
		return false
	}
}
