package store

import "context"

// RunWatcher is an optional capability of a Store: one feed of every run topic
// of a namespace, so that a process waiting for many runs learns which of them
// changed without a subscription (and a goroutine) per run. The client's
// results watcher uses it when the store offers it and polls otherwise.
type RunWatcher interface {
	// WatchRuns starts a feed of the IDs of the runs of namespace whose RunTopic
	// was signalled. crossProcess reports whether the feed also carries the
	// commits of other processes (Postgres: LISTEN/NOTIFY); when false, changes
	// made elsewhere are seen only by reading.
	WatchRuns(namespace string) (feed RunFeed, crossProcess bool)
}

// ForeignCommits is an optional capability of a RunWatcher whose feed misses
// other processes' commits (crossProcess false). A waiter polls such a store
// for what the feed missed; ForeignCommitMark lets it poll only when something
// could have been missed.
type ForeignCommits interface {
	// ForeignCommitMark returns a value that changes whenever a commit reaches
	// the store that did not go through this Store value (another process, or
	// another Store opened on the same file) and stays the same across this
	// value's own commits. It may change without such a commit; it must not
	// stay the same across one.
	ForeignCommitMark(ctx context.Context) (int64, error)
}

// RunFeed is a feed of changed runs (RunWatcher).
type RunFeed interface {
	// Changed receives a (coalesced) signal when Take has something new.
	Changed() <-chan struct{}
	// Take returns and forgets the IDs of the runs signalled since the last
	// Take. all reports that signals may have been lost since (the store lost
	// its notification connection): every run may have changed.
	Take() (runIDs []string, all bool)
	// Stop ends the feed. Idempotent.
	Stop()
}

// RunTopicPrefix is the prefix of the RunTopic of every run of namespace.
func RunTopicPrefix(namespace string) string { return "run:" + namespace + "/" }
