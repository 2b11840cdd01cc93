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

// ForeignPoll tells a poller of a store whose wake-ups miss other processes'
// commits whether a poll must read: always, unless the store is a
// ForeignCommits and its mark is the same as before the last poll that read.
// The zero value says every poll must read. Not safe for concurrent use.
type ForeignPoll struct {
	marks  ForeignCommits // nil: every poll reads
	mark   int64
	marked bool
}

// NewForeignPoll returns the ForeignPoll of a store (any value: a store that is
// not a ForeignCommits is read at every poll).
func NewForeignPoll(s any) ForeignPoll {
	fc, _ := s.(ForeignCommits)
	return ForeignPoll{marks: fc}
}

// Due reports whether this poll must read; call it before the read. The mark is
// read first, so a commit after it changes the next one. A failed read of the
// mark says to read (the read tells what is wrong).
func (p *ForeignPoll) Due(ctx context.Context) bool {
	if p.marks == nil {
		return true
	}
	m, err := p.marks.ForeignCommitMark(ctx)
	if err != nil {
		p.marked = false
		return true
	}
	if p.marked && m == p.mark {
		return false
	}
	p.mark, p.marked = m, true
	return true
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
