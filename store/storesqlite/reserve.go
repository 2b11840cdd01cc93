package storesqlite

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/trellis-dev/trellis/store"
)

// DefaultDiskReserve is Config.DiskReserve's default: room for a few hundred
// running runs to finish and for the WAL to be copied into the database.
const DefaultDiskReserve = 32 << 20

// reserveRecheck is the least time between two looks at the volume made by
// refused starts.
const reserveRecheck = 100 * time.Millisecond

// nearRecheck is the least time between two looks at the volume made by
// accepted starts while it is near the point where starts are refused (see
// diskReserve.near): starts can fill a volume between two of the looks made
// after WAL checkpoints (once a second).
const nearRecheck = 10 * time.Millisecond

// diskReserve keeps Config.DiskReserve bytes of the volume for the runs that
// are running (see Config.DiskReserve). It holds them in a file beside the
// database, allocated but never written, and gives the file back when the
// volume is about to fill up or a write failed on a full disk. While the
// reserve is not held, or little is free beside it, new runs are refused: what
// space there is goes to the runs that were acknowledged, and to the WAL's
// checkpoints. The volume is looked at after each WAL checkpoint (at most once
// a second, while the store writes) and, at most every reserveRecheck, by
// refused starts.
type diskReserve struct {
	s    *Store
	path string
	size int64
	// refusing and near are what the hot path reads: new runs are refused;
	// the volume, as last seen, had less than four reserves free beside the
	// reserve, and starts look at it again every nearRecheck.
	refusing atomic.Bool
	near     atomic.Bool
	last     atomic.Int64 // when a start last looked at the volume (Unix ns)
	mu       sync.Mutex   // one look at a time
	held     bool         // the file holds size bytes, as last seen
	// given is set when the reserve was given back (a full volume), until it
	// is held again.
	given bool
	// walHigh is the WAL's largest size seen since new runs were refused
	// (or the reserve given back): starts are accepted again, and the
	// reserve taken back, only once there is room beside it for the WAL to
	// grow back to that size. The space a WAL truncation or restart frees
	// is not free for long; counting it had starts accepted and refused in
	// turns, each turn a backlog the reserve had to finish.
	walHigh int64
}

// openDiskReserve allocates the reserve of a store that writes (nil when it
// has none: turned off, a store opened only to look, or a system without a
// way to read free space). A volume without room for it leaves the store
// refusing new runs until there is.
func openDiskReserve(s *Store, cfg Config) *diskReserve {
	if cfg.DiskReserve <= 0 || cfg.NoMigrate {
		return nil
	}
	if _, ok := freeSpace(filepath.Dir(cfg.Path)); !ok {
		return nil
	}
	r := &diskReserve{s: s, path: cfg.Path + "-reserve", size: cfg.DiskReserve}
	r.check()
	return r
}

// admit returns nil when new runs may be created, else store.ErrStorageFull
// with what to do about it. Nil-safe.
func (r *diskReserve) admit() error {
	if r == nil {
		return nil
	}
	refusing := r.refusing.Load()
	if !refusing && !r.near.Load() {
		return nil
	}
	every := nearRecheck
	if refusing {
		every = reserveRecheck
	}
	if now := time.Now().UnixNano(); now-r.last.Load() >= int64(every) {
		r.last.Store(now)
		r.check()
	}
	if !r.refusing.Load() {
		return nil
	}
	return fmt.Errorf("%w: the volume of %s has less free space than the disk reserve (%d bytes) that lets running runs finish: "+
		"new runs are refused until there is room again (free disk space; see docs/storage.md, A full disk)", store.ErrStorageFull,
		r.s.cfg.Path, r.size)
}

// writeFailed gives the reserve back after a write failed on a full disk
// (full; an I/O error gives it back only when the volume is almost full): the
// next checkpoints of running runs, and of the WAL, get its space, and new
// runs are refused. Nil-safe.
func (r *diskReserve) writeFailed(full bool) {
	if r == nil {
		return
	}
	if !full {
		r.check()
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.releaseLocked("a write failed on a full disk", fileSize(r.s.cfg.Path+"-wal"))
}

// check looks at the volume: the reserve is given back when little is free
// beside it, taken again when there is room for it and as much again (and
// for the WAL to grow back), and new runs are refused while it is not held or
// less than half of it is free beside it (a whole reserve, and room for the
// WAL to grow back, once refusing: starts do not flap). Nil-safe.
func (r *diskReserve) check() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	free, _ := freeSpace(filepath.Dir(r.path))
	wal := fileSize(r.s.cfg.Path + "-wal")
	refusing := r.refusing.Load()
	if refusing || r.given {
		r.walHigh = max(r.walHigh, wal)
	}
	headroom := max(0, r.walHigh-wal)
	r.held = fileSize(r.path) >= r.size
	switch {
	case r.held && free < r.size/4:
		r.releaseLocked("the volume is almost full", wal)
		refusing = true
		free += r.size
	case !r.held && free-headroom >= 2*r.size:
		if err := allocate(r.path, r.size); err != nil {
			r.s.log.Warn("storesqlite: taking the disk reserve back", "path", r.path, "bytes", r.size, "err", err)
		} else {
			r.held = true
			free -= r.size
			if r.given {
				r.given = false
				r.s.log.Info("storesqlite: disk reserve held again; new runs are accepted", "path", r.path, "bytes", r.size)
			}
		}
	}
	if refusing {
		refusing = !r.held || free-headroom < r.size
	} else if refusing = !r.held || free < r.size/2; refusing {
		r.walHigh = wal
	}
	if !refusing && !r.given {
		r.walHigh = 0
	}
	r.refusing.Store(refusing)
	r.near.Store(free < 4*r.size)
}

// releaseLocked gives the reserve's space back; r.mu is held, wal is the
// WAL's size.
func (r *diskReserve) releaseLocked(why string, wal int64) {
	r.refusing.Store(true)
	if !r.held && fileSize(r.path) == 0 {
		return
	}
	err := os.Truncate(r.path, 0)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		r.s.log.Error("storesqlite: giving the disk reserve back", "path", r.path, "err", err)
		return
	}
	r.held, r.given, r.walHigh = false, true, max(r.walHigh, wal)
	r.s.log.Error("storesqlite: "+why+": the disk reserve is given to running runs; new runs are refused until space returns",
		"path", r.path, "bytes", r.size)
}

// fileSize is the size of the file at path, 0 when it cannot be read.
func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}
