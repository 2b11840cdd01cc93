package main

import (
	"strings"
	"testing"
)

// TestRunsReset resets the failed seed run to its step: a new pending run of the
// same workflow ID appears (no worker runs here); bad input changes nothing.
func TestRunsReset(t *testing.T) {
	t.Parallel()
	s := seed(t)
	res := trellisCmd(t, "runs", "reset", s.failedID, "--to", "doomed", "--store", s.url).ok(t)
	contains(t, "reset", res.stdout, "reset: new run", "pending", s.failedID)
	res = trellisCmd(t, "runs", "list", "--workflow", "fails", "--store", s.url).ok(t)
	if n := strings.Count(res.stdout, s.failedID); n != 2 {
		t.Fatalf("after reset, %d runs of %s, want 2:\n%s", n, s.failedID, res.stdout)
	}
	for _, args := range [][]string{
		{"runs", "reset", s.okID, "--to", "nope", "--store", s.url},
		{"runs", "reset", "no-such-run", "--to", "flaky", "--store", s.url},
	} {
		if res := trellisCmd(t, args...); res.code == 0 {
			t.Errorf("%v: exit 0, want an error\n%s", args, res.stdout)
		}
	}
	res = trellisCmd(t, "runs", "list", "--store", s.url).ok(t)
	if n := strings.Count(res.stdout, "\n"); n != 4 {
		t.Fatalf("runs after the refused resets:\n%s", res.stdout)
	}
}
