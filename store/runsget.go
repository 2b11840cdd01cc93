package store

import "fmt"

// MaxRunsGet caps the run IDs of one RunsGet call.
const MaxRunsGet = 1000

// RunsGetParams are the parameters of RunsGet.
type RunsGetParams struct {
	Namespace string `json:"namespace"`
	// IDs are run IDs (not workflow IDs); at most MaxRunsGet. Duplicates are
	// allowed and return the run once.
	IDs []string `json:"ids"`
	// Statuses, when set, returns only the runs in one of these states (a waiter
	// asks for the terminal ones).
	Statuses []Status `json:"statuses,omitempty"`
}

// RunsGet (Store.RunsGet) returns the runs with the given run IDs, in no
// particular order, in one read: a process waiting for many runs' results reads
// their outcomes in batches instead of one RunGet per run. IDs that match no run
// (or whose run is in another state than Statuses) are left out, without error.
// Unlike RunGet, the WaitReason of a pending run is returned as stored: it is not
// explained from the worker registry.

// ValidateRunsGet checks p: ErrInvalidParams for too many IDs or an unknown status.
func ValidateRunsGet(p *RunsGetParams) error {
	if len(p.IDs) > MaxRunsGet {
		return fmt.Errorf("%w: %d IDs (at most %d)", ErrInvalidParams, len(p.IDs), MaxRunsGet)
	}
	for _, st := range p.Statuses {
		if !st.Valid() {
			return fmt.Errorf("%w: Statuses: unknown status %q", ErrInvalidParams, st)
		}
	}
	return nil
}

// TerminalStatuses are the final states, for RunsGetParams.Statuses.
var TerminalStatuses = []Status{StatusSucceeded, StatusFailed, StatusCancelled}
