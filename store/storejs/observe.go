package storejs

import (
	"time"

	"github.com/trellis-dev/trellis/store"
)

// The methods of the store's optional interfaces that the generator leaves to
// hand (internal/gen, handWritten): they take a func or have no context.

// ObserveCommits implements store.CommitObserver: the replica's commits,
// which are the log's batches (written by this server while it leads,
// applied from the log while it follows).
func (s *Store) ObserveCommits(f func(requests int, elapsed time.Duration)) (stop func()) {
	return s.rep.ObserveCommits(f)
}

// WatchRuns implements store.RunWatcher with the replica's feed. It carries
// every server's commits (crossProcess true): a follower's replica signals
// the topics of every record it applies, whoever wrote it.
func (s *Store) WatchRuns(namespace string) (store.RunFeed, bool) {
	feed, _ := s.rep.WatchRuns(namespace)
	return feed, true
}
