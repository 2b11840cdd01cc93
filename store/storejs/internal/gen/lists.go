package main

import (
	"reflect"

	"github.com/trellis-dev/trellis/store"
)

// implemented are the interfaces storejs.Store implements: store.Store (with
// the roles it embeds, listed too so that each is checked) and every optional
// interface of package store that *storesqlite.Store implements, but excluded.
var implemented = []reflect.Type{
	reflect.TypeFor[store.Store](),
	reflect.TypeFor[store.WorkerStore](),
	reflect.TypeFor[store.RunStore](),
	reflect.TypeFor[store.EventStore](),
	reflect.TypeFor[store.ApprovalStore](),
	reflect.TypeFor[store.AdminStore](),
	reflect.TypeFor[store.ScheduleStore](),
	reflect.TypeFor[store.Subscriber](),
	reflect.TypeFor[store.BatchCreator](),
	reflect.TypeFor[store.RunDeleter](),
	reflect.TypeFor[store.WorkerRegistry](),
	reflect.TypeFor[store.TokenStore](),
	reflect.TypeFor[store.KeyStore](),
	reflect.TypeFor[store.AuditStore](),
	reflect.TypeFor[store.IdempotencyStore](),
	reflect.TypeFor[store.SessionStore](),
	reflect.TypeFor[store.QueueStore](),
	reflect.TypeFor[store.RunCounter](),
	reflect.TypeFor[store.CommitObserver](),
	reflect.TypeFor[store.QueueCounter](),
	reflect.TypeFor[store.WorkerCounter](),
	reflect.TypeFor[store.RunWatcher](),
}

// excluded are the optional interfaces *storesqlite.Store implements that
// storejs.Store must not: the transactional ones work on the replica's own
// database, which a follower must not write and whose transactions the log
// does not see; ForeignCommits says that the store misses other processes'
// commits, which the log's subscribers do not.
var excluded = map[reflect.Type]string{
	reflect.TypeFor[store.TxStarter]():      "a transaction of the caller's on the replica is not in the log",
	reflect.TypeFor[store.TxCheckpointer](): "a transaction of the caller's on the replica is not in the log",
	reflect.TypeFor[store.ForeignCommits](): "the log carries every server's commits",
}

// handWritten are the methods the driver writes by hand, with the reason.
// A method that takes a func or returns a channel, or has no context first,
// must be here.
var handWritten = map[string]string{
	"Close":          "ends the log's subscription, the leader's services and the replica",
	"Subscribe":      "returns a channel: the replica's signals, fed by the applied log",
	"ObserveCommits": "takes a func: the commits are the leader's batches",
	"WatchRuns":      "no context; the feed is the replica's, fed by the applied log",
}

// reads are served by the local replica (after read).
var reads = []string{
	"ApprovalGet", "ApprovalList", "AuditList", "AuditNamespaces", "HistoryList",
	"IdempotencyGet", "KVGet", "NamespaceGet", "NamespaceList", "QueueCounts",
	"QueueGet", "QueueList", "RunChildren", "RunCounts", "RunGet", "RunList",
	"RunNamespaces", "RunsGet", "ScheduleGet", "ScheduleList", "SessionEnded",
	"StreamRead", "TokenByHash", "TokenBySubject", "TokenList", "WorkerCounts",
	"WorkerList",
}

// writes run on the leader (write): a follower forwards them. SecretKey is a
// write: it keeps the key it is given when the store has none.
var writes = []string{
	"ApprovalDecide", "AuditAppend", "AuditPurge", "Checkpoint", "EventSend",
	"IdempotencyPurge", "LeaseRelease", "LeasesExtend", "NamespaceCreate",
	"NamespaceUpdate", "QueueCreate", "QueueSetPaused", "QueueUpdate", "RunCancel",
	"RunCreate", "RunDelete", "RunResume", "RunsClaim", "RunsCreate", "RunsPurge",
	"RunsResumeBlocked", "ScheduleCreate", "ScheduleDelete", "ScheduleFire",
	"SchedulePause", "ScheduleUpdate", "SchedulerLeaseAcquire",
	"SchedulerLeaseRelease", "SecretKey", "SessionEnd", "SessionsPurge",
	"TokenCreate", "TokenRevoke", "TokenRotate", "TokenTouch", "WorkerHeartbeat",
	"WorkerRemove",
}
