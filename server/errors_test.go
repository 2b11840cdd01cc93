package server

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/trellis-dev/trellis"
)

// A problem's detail says what went wrong from the error's sentinel on, not
// the chain of calls the error went through; an error the table does not
// know says nothing of itself (it may name hosts or paths).
func TestProblemDetailForPeople(t *testing.T) {
	for _, c := range []struct {
		err        error
		code, want string
	}{
		{fmt.Errorf("opening trellis: store: reading run: %w", fmt.Errorf(`%w: "x" in namespace "default"`, trellis.ErrRunNotFound)),
			"run_not_found", `run not found: "x" in namespace "default"`},
		{fmt.Errorf("starting order: %w: limit 10", trellis.ErrPayloadTooLarge), "payload_too_large", "payload too large: limit 10"},
		{ErrPermissionDenied, "permission_denied", "permission denied"},
		{fmt.Errorf("reading the runs: %w", context.Canceled), "unavailable",
			"the server cannot answer now (it is stopping, or its store does not answer); retry later"},
		{&notAllowed{method: "PUT", allow: []string{"GET", "HEAD"}}, "method_not_allowed",
			"method not allowed: this path takes GET, HEAD, not PUT"},
		{fmt.Errorf("dialing db.internal:5432: %w", errors.New("connection refused")), "internal", "internal error (logged by the server)"},
	} {
		p, _ := problemFor(c.err)
		if p.Code != c.code || p.Detail != c.want {
			t.Errorf("%v: %s %q, want %s %q", c.err, p.Code, p.Detail, c.code, c.want)
		}
	}
}
