package engine

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
)

// The run's logger drops the lines of code that replays recorded ops and writes
// those past the last of them, with the run's attributes.
func TestRunLoggerIsSilentWhileReplaying(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	e, _, _ := setup(t, func(rs *RunState) (any, error) {
		rs.Logger().Info("before a")
		rs.Step("a", stepOf(1), noRetry(), false)
		rs.Logger().Info("after a")
		rs.Step("b", stepOf(2), noRetry(), false)
		rs.Logger().Info("after b")
		return nil, nil
	})
	e.cfg.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	execute(e, context.Background(), claimed(doneStep(0, "a", "1"), doneStep(1, "b", "2")))
	execute(e, context.Background(), claimed(doneStep(0, "a", "1")))
	out := buf.String()
	for line, want := range map[string]int{"before a": 0, "after a": 1, "after b": 2} {
		if n := strings.Count(out, line); n != want {
			t.Fatalf("%q written %d times, want %d:\n%s", line, n, want, out)
		}
	}
	if !strings.Contains(out, "run_id=r1") || !strings.Contains(out, "workflow=wf") {
		t.Fatalf("attributes missing:\n%s", out)
	}
}
