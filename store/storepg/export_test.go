package storepg

// MergeSingleCheckpoints makes s send even a lone checkpoint as the multi-row
// statement of a batch (sqlCheckpoints), so the conformance suite covers it.
func MergeSingleCheckpoints(s *Store) { s.mergeSingle = true }
