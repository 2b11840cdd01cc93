// Package storesqlite is the SQLite driver of the Trellis storage contract
// (store.Store), built on modernc.org/sqlite (pure Go, no C compiler needed) or,
// in a build with the tag trellis_cgo, on github.com/mattn/go-sqlite3 (SQLite's C
// library through cgo, about half the CPU per statement; see internal/sqlitedrv).
//
// # Group commit
//
// Every write (RunCreate, RunCancel, RunResume, RunsResumeBlocked, RunsClaim,
// LeasesExtend, LeaseRelease, Checkpoint) is a request handed to one writer goroutine
// that owns the only write connection. The writer takes a request, drains the others
// already queued (up to Config.MaxBatch), and applies them back to back in one BEGIN
// IMMEDIATE transaction, without savepoints. Each request checks its preconditions
// before it writes, so one that fails with one of the store's errors (a stale lease
// token, a rejected start) has written nothing and the batch goes on. A request that
// fails after writing rolls the whole transaction back, and the batch is replayed
// with one SAVEPOINT per request, so that only the failed request's writes are undone
// (Stats.Replays counts these). One COMMIT, so one fsync, acknowledges the whole
// batch; notifications are published after it. Reads use a separate pool of
// read-only connections, which WAL lets run concurrently with the writer.
//
// # The WAL
//
// A background connection checkpoints the WAL off the commit path (PASSIVE, at most
// once a second); the writer restarts it between two transactions when it passes
// Config.WALLimit (journal_size_limit then truncates the file); and after a write failed on a full disk or an I/O error
// no write runs until a TRUNCATE checkpoint emptied it, so the store recovers by
// itself once space returns. See walCheckpointer.
//
// # Durability
//
// DurabilityFsync (the default) runs WAL with synchronous=FULL: a call returns only
// once its commit is on disk. DurabilityRelaxed uses synchronous=NORMAL, which
// survives a process crash but may lose the last commits on power loss or an OS
// crash.
//
// # Schema
//
// Migrations are embedded (migrations/NNNN_name.sql), numbered, recorded in the
// schema_migrations table, and applied by Open and Store.Migrate. Times are stored as
// INTEGER unix nanoseconds and returned in UTC; payloads are BLOBs; errors are JSON.
package storesqlite
