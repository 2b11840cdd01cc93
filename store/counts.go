package store

import (
	"context"
	"time"
)

// RunCounter is an optional capability of a store: counting runs per status
// cheaply, for the web UI's runs page. The SQL drivers implement it.
type RunCounter interface {
	// RunCounts counts the runs of a namespace per status, with the filters of
	// RunList (but Statuses). A count stops at Cap: a status with more runs
	// than Cap reports Cap+1 and is marked in Capped, so that a page over a
	// large store stays fast.
	RunCounts(ctx context.Context, p *RunCountsParams) (*RunCountsResult, error)
}

// RunCountsParams are the parameters of RunCounts.
type RunCountsParams struct {
	Namespace     string
	Workflow      string
	Queue         string
	CreatedAfter  time.Time
	CreatedBefore time.Time
	// Cap bounds each count; 0 means DefaultCountCap.
	Cap int64
}

// DefaultCountCap is the count RunCounts stops at by default.
const DefaultCountCap = 100_000

// RunCountsResult is the result of RunCounts.
type RunCountsResult struct {
	// Counts has an entry for every status (AllStatuses).
	Counts map[Status]int64
	// Capped marks the statuses whose count reached the cap.
	Capped map[Status]bool
}

// AllStatuses lists every run status, the active ones first.
var AllStatuses = []Status{StatusPending, StatusRunning, StatusWaiting, StatusBlocked,
	StatusSucceeded, StatusFailed, StatusCancelled}
