package main

import (
	"strings"
	"testing"
)

// TestRunsWatch: a finished run's stream is printed whole and the command
// exits; --after skips; --json prints one object per line; a bad --after is a
// usage error.
func TestRunsWatch(t *testing.T) {
	t.Parallel()
	s := seed(t)
	res := trellisCmd(t, "runs", "watch", s.okID, "--store", s.url).ok(t)
	lines := strings.Split(strings.TrimSuffix(res.stdout, "\n"), "\n")
	want := []string{"1 run.started ", "2 step.failed ", "3 step.completed ", "4 run.succeeded {\"result\":42}"}
	if len(lines) != len(want) {
		t.Fatalf("watch printed %d lines, want %d:\n%s", len(lines), len(want), res.stdout)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d = %q, want prefix %q", i, lines[i], w)
		}
	}
	contains(t, "step.failed line", lines[1], `"name":"flaky"`, `"attempt":1`, `first attempt fails`)
	res = trellisCmd(t, "runs", "watch", s.okRun, "--after", "3", "--json", "--store", s.url).ok(t)
	if strings.Count(res.stdout, "\n") != 1 || !strings.Contains(res.stdout, `"name":"run.succeeded"`) || !strings.Contains(res.stdout, `"sequence":4`) {
		t.Errorf("watch --after 3 --json printed %q", res.stdout)
	}
	res = trellisCmd(t, "runs", "watch", s.failedRun, "--after", "now", "--store", s.url)
	if res.stdout != "" || res.code != exitRunFailed || !strings.Contains(res.stderr, "card declined") {
		t.Errorf("watch --after now of a failed run: exit %d, stdout %q, stderr %q", res.code, res.stdout, res.stderr)
	}
	for _, bad := range []string{"abc", "-1"} {
		res = trellisCmd(t, "runs", "watch", s.okRun, "--after", bad, "--store", s.url)
		if res.code != 2 || !strings.Contains(res.stderr, "--after") {
			t.Errorf("--after %s: exit %d %q", bad, res.code, res.stderr)
		}
	}
	res = trellisCmd(t, "runs", "watch", "nope", "--store", s.url)
	if res.code != exitNotFound || !strings.Contains(res.stderr, "nope") {
		t.Errorf("watch of an unknown run: exit %d %q", res.code, res.stderr)
	}
}
