package storepg

import "time"

// MergeSingleCheckpoints makes s send even a lone checkpoint as the multi-row
// statement of a batch (sqlCheckpoints), so the conformance suite covers it.
func MergeSingleCheckpoints(s *Store) { s.mergeSingle = true }

// ConnectTimeoutOf returns the connect timeout the pool of cfg would use.
func ConnectTimeoutOf(t interface{ Fatal(...any) }, cfg Config) time.Duration {
	pc, err := poolConfig(cfg.withDefaults())
	if err != nil {
		t.Fatal(err)
	}
	return pc.ConnConfig.ConnectTimeout
}
