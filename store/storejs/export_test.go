package storejs

import "time"

// SetPublishTimeout shortens how long an append waits for its
// acknowledgement (tests that lose one).
func SetPublishTimeout(d time.Duration) func() {
	old := publishTimeout
	publishTimeout = d
	return func() { publishTimeout = old }
}

// View is the store as package trellis uses it.
var View = view

// WaitLeading waits until the store writes the log (20 s at most).
var WaitLeading = waitLeading
