// Package storesqlite is the SQLite driver of the Trellis storage contract
// (store.Store), built on modernc.org/sqlite (pure Go, no C compiler needed).
//
// # Group commit
//
// Every write (RunCreate, RunCancel, RunResume, RunsResumeBlocked, RunsClaim,
// LeasesExtend, LeaseRelease, Checkpoint) is a request handed to one writer goroutine
// that owns the only write connection. The writer takes a request, drains the others
// already queued (up to Config.MaxBatch), and applies them in one BEGIN IMMEDIATE
// transaction, each inside its own SAVEPOINT: a request that fails (a stale lease
// token, a rejected start) rolls back alone while the rest of the batch commits. One
// COMMIT, so one fsync, acknowledges the whole batch; notifications are published
// after it. Reads use a separate pool of read-only connections, which WAL lets run
// concurrently with the writer.
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
