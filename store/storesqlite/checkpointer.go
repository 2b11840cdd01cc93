package storesqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"sync/atomic"
	"time"

	"github.com/trellis-dev/trellis/internal/sqlitedrv"
)

// walCheckpointInterval is the least time between two background WAL checkpoints.
const walCheckpointInterval = time.Second

// walAutoCheckpointPages is the writer's own checkpoint threshold, a backstop in
// case the background checkpointer falls behind (SQLite's default is 1000).
const walAutoCheckpointPages = 10000

// walCheckpointer copies committed WAL frames into the database file on its own
// connection, so the writer does not spend its time (and fsyncs) doing it on the
// commit path. PASSIVE checkpoints never block the writer.
//
// Passive checkpoints alone do not bound the WAL: the file is reused from its start
// only when a checkpoint finished and no reader still uses old frames, so under
// steady reads it can keep growing, and it never shrinks. On a full volume that is
// fatal: a WAL that took the space freed after a disk-full error leaves none for
// the next write, for good. So when the WAL file passes Config.WALLimit the
// writer runs a RESTART checkpoint between two transactions (writer.boundWAL: it
// waits for readers, then the next write starts the WAL over and
// journal_size_limit truncates the file to WALLimit), and after a failed write
// this checkpointer runs a TRUNCATE checkpoint (the WAL file is emptied), again at
// each interval until one completes.
type walCheckpointer struct {
	s       *Store
	db      *sql.DB
	walPath string
	limit   int64
	failed  atomic.Bool   // a write failed: truncate the WAL
	signal  chan struct{} // coalesced: a commit happened or a write failed
	quit    chan struct{}
	stopped chan struct{}
}

func startWALCheckpointer(s *Store, cfg Config) (*walCheckpointer, error) {
	db, err := sqlitedrv.Open(dsn(cfg, false))
	if err != nil {
		return nil, fmt.Errorf("opening checkpoint connection: %w", err)
	}
	db.SetMaxOpenConns(1)
	c := &walCheckpointer{
		s: s, db: db, walPath: cfg.Path + "-wal", limit: cfg.WALLimit, signal: make(chan struct{}, 1),
		quit: make(chan struct{}), stopped: make(chan struct{}),
	}
	go c.run()
	return c, nil
}

// notify tells the checkpointer a commit happened; it never blocks.
func (c *walCheckpointer) notify() {
	select {
	case c.signal <- struct{}{}:
	default:
	}
}

// writeFailed tells the checkpointer a write failed (a full disk, an I/O error):
// the WAL is truncated as soon as possible.
func (c *walCheckpointer) writeFailed() {
	c.failed.Store(true)
	c.notify()
}

func (c *walCheckpointer) run() {
	defer close(c.stopped)
	pause := time.NewTimer(0)
	defer pause.Stop()
	signalled := false
	for {
		if !signalled && !c.failed.Load() { // a failed truncation is retried after the pause
			select {
			case <-c.signal:
			case <-c.quit:
				return
			}
		}
		c.checkpoint()
		c.s.reserve.Load().check()
		pause.Reset(walCheckpointInterval)
		var stop bool
		if signalled, stop = c.pause(pause); stop {
			return
		}
	}
}

// pause waits for the pause between two checkpoints, cut short when a commit
// leaves the WAL over its limit or a write failed. It reports whether a commit
// happened meanwhile, and stop when the checkpointer must end.
func (c *walCheckpointer) pause(t *time.Timer) (signalled, stop bool) {
	for {
		select {
		case <-t.C:
			return signalled, false
		case <-c.quit:
			return false, true
		case <-c.signal:
			signalled = true
			if c.failed.Load() || c.walSize() > c.limit {
				return true, false
			}
		}
	}
}

// checkpoint runs one checkpoint: TRUNCATE after a failed write, PASSIVE
// otherwise, past the limit too: the writer restarts the WAL itself between
// two transactions (writer.boundWAL), since a RESTART here needs the write
// lock, which a busy writer seldom leaves free, and meanwhile holds the
// checkpoint lock the writer's would need; the frames copied now make the
// writer's RESTART short.
func (c *walCheckpointer) checkpoint() {
	mode := "PASSIVE"
	if c.failed.Swap(false) {
		mode = "TRUNCATE"
	}
	var busy, frames, done int
	err := c.db.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &frames, &done)
	if err != nil {
		c.s.log.Warn("storesqlite: checkpointing WAL", "mode", mode, "err", err)
	}
	if mode == "TRUNCATE" && (err != nil || busy != 0) {
		if err == nil {
			c.s.log.Warn("storesqlite: truncating WAL: busy, retrying", "frames", frames, "checkpointed", done)
		}
		c.failed.Store(true) // try again after the pause
	}
}

// walSize is the size of the WAL file (0 when it does not exist or cannot be read).
func (c *walCheckpointer) walSize() int64 {
	st, err := os.Stat(c.walPath)
	if err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			c.s.log.Warn("storesqlite: reading WAL size", "err", err)
		}
		return 0
	}
	return st.Size()
}

func (c *walCheckpointer) stop() error {
	close(c.quit)
	<-c.stopped
	if err := c.db.Close(); err != nil {
		return fmt.Errorf("closing checkpoint connection: %w", err)
	}
	return nil
}
