// Package storepg is the PostgreSQL driver of the Trellis storage contract
// (store.Store), for many workers and application nodes sharing one database.
//
// Open it with a URL such as
//
//	postgres://user@host:5432/db?schema=trellis
//
// Everything lives in one schema (default "trellis"), so several installations can
// share a database. Embedded, numbered migrations run at Open under an advisory lock
// derived from the schema name: when many processes start at once, one migrates and
// the others wait.
//
// Writes go through a group-commit writer: the write calls waiting at the same time
// are sent as one pipelined batch (one round trip) and committed in one implicit
// transaction. Each call is a single statement (a data-modifying CTE when it writes
// several tables), fenced by the lease token inside the statement, so a checkpoint
// with a lost lease writes nothing and fails alone while the rest of the batch
// commits. A statement that fails for an unexpected reason aborts the batch; the
// writer then answers that call with its error and commits the others without it.
//
// Claims take due runs with FOR UPDATE SKIP LOCKED, so concurrent workers neither
// claim the same run nor wait for each other.
//
// Every committed transaction that changed something publishes its topics with one
// pg_notify on a channel named from the schema; each Store keeps one listening
// connection that forwards other processes' notifications to its local subscribers
// (Subscribe), and reconnects with backoff when the connection drops.
package storepg
