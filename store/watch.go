package store

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
