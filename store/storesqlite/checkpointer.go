package storesqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// walCheckpointInterval is the least time between two background WAL checkpoints.
const walCheckpointInterval = time.Second

// walAutoCheckpointPages is the writer's own checkpoint threshold, a backstop in
// case the background checkpointer falls behind (SQLite's default is 1000).
const walAutoCheckpointPages = 10000

// walCheckpointer copies committed WAL frames into the database file on its own
// connection, so the writer does not spend its time (and fsyncs) doing it on the
// commit path. PASSIVE checkpoints never block the writer.
type walCheckpointer struct {
	s       *Store
	db      *sql.DB
	signal  chan struct{} // coalesced: a commit happened
	quit    chan struct{}
	stopped chan struct{}
}

func startWALCheckpointer(s *Store, cfg Config) (*walCheckpointer, error) {
	db, err := sql.Open("sqlite", dsn(cfg, false))
	if err != nil {
		return nil, fmt.Errorf("opening checkpoint connection: %w", err)
	}
	db.SetMaxOpenConns(1)
	c := &walCheckpointer{
		s: s, db: db, signal: make(chan struct{}, 1),
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

func (c *walCheckpointer) run() {
	defer close(c.stopped)
	pause := time.NewTimer(0)
	defer pause.Stop()
	for {
		select {
		case <-c.signal:
		case <-c.quit:
			return
		}
		if _, err := c.db.ExecContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)"); err != nil {
			c.s.log.Warn("storesqlite: checkpointing WAL", "err", err)
		}
		pause.Reset(walCheckpointInterval)
		select {
		case <-pause.C:
		case <-c.quit:
			return
		}
	}
}

func (c *walCheckpointer) stop() error {
	close(c.quit)
	<-c.stopped
	if err := c.db.Close(); err != nil {
		return fmt.Errorf("closing checkpoint connection: %w", err)
	}
	return nil
}
