package storesqlite

import "time"

// ForgetCommitMark drops the store's last reading of the foreign commit mark,
// so that the next ForeignCommitMark reads it again.
func ForgetCommitMark(s *Store) {
	s.mark.mu.Lock()
	defer s.mark.mu.Unlock()
	s.mark.at = time.Time{}
}

// ReuseCommitMark sets how long a reading of the foreign commit mark is handed
// out again.
func ReuseCommitMark(s *Store, d time.Duration) {
	s.mark.mu.Lock()
	defer s.mark.mu.Unlock()
	s.mark.reuse = d
}
