// Package storejs is the store on NATS JetStream: a replicated, fenced
// commit log with a SQLite replica on every server (docs/jetstream.md).
//
// One JetStream stream per Trellis cluster, TRELLIS_<name>, is the record.
// The server holding the leader lease (a JetStream KeyValue entry with an
// epoch) writes: its replica's writer runs the SQLite driver's rules
// unchanged and appends each group-commit batch to the log as one record
// (the batch's write statements with their arguments), fenced by
// Nats-Expected-Last-Sequence, and commits the batch locally only after
// JetStream acknowledged it. Every record carries a format and schema
// version, the writer's epoch and the previous record's SHA-256, so a replica
// detects a lost, altered or reordered record and stops instead of going on.
//
// The other servers on the stream follow: they apply the log to their
// replicas, serve reads, streams and the UI from them, and forward writes to
// the leader over NATS request/reply (read-your-writes: a forwarded write
// returns once the follower applied it). When the leader's lease lapses one
// of them takes over; the deposed leader's next append fails on the expected
// sequence and rolls back. A replica is a cache: delete it and it is rebuilt
// from the newest snapshot (a copy of the writer's replica in the object
// store TRELLIS_<name>_SNAPSHOTS) and the log after it; the log is compacted
// behind the snapshots (snapshot.go).
//
// URLs:
//
//	jetstream:///var/lib/trellis              an embedded nats-server, data beside the replica
//	jetstream:///var/lib/trellis?routes=...   embedded servers forming a cluster (replicas=3)
//	nats://h1,h2,h3/NAME?replicas=3&creds=... an existing NATS cluster
//
// Import the package for its side effect to open such URLs with store.Open:
//
//	import _ "github.com/trellis-dev/trellis/store/storejs"
package storejs
