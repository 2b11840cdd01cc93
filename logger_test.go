package trellis_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
)

// syncBuffer is a bytes.Buffer safe for the logger's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// wc.Logger writes each line once although the run is replayed after its sleep,
// with the run's attributes; StepLogger adds the step.
func TestWorkflowLoggerDoesNotRepeatOnReplay(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	wf := trellis.NewWorkflow("logs", func(wc *trellis.Context, _ int) (int, error) {
		wc.Logger().Info("first line")
		n, err := trellis.Step(wc, "work", func(ctx context.Context) (int, error) {
			trellis.StepLogger(ctx).Info("in the step")
			return 1, nil
		})
		if err != nil {
			return 0, err
		}
		if err := wc.Sleep(100 * time.Millisecond); err != nil { // released, then replayed
			return 0, err
		}
		wc.Logger().Info("last line")
		return n, nil
	})
	c := open(t, storeURL(t), func(cfg *trellis.Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	register(t, c, wf)
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctxT(t), c, wf, 0))
	mustResult(t, h)
	out := buf.String()
	for _, line := range []string{"first line", "in the step", "last line"} {
		if n := strings.Count(out, line); n != 1 {
			t.Fatalf("%q logged %d times:\n%s", line, n, out)
		}
	}
	if !strings.Contains(out, "run_id="+h.RunID()) || !strings.Contains(out, "step=work") {
		t.Fatalf("attributes missing:\n%s", out)
	}
}
