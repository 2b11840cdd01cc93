package streams

// WatchCount returns the number of shared pollers running (foreignWatch).
func WatchCount() int {
	watches.mu.Lock()
	defer watches.mu.Unlock()
	return len(watches.m)
}
