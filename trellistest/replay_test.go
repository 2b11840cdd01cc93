package trellistest_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/trellistest"
)

func loadGolden(t *testing.T, name string) *trellis.RecordedHistory {
	t.Helper()
	h, err := trellistest.LoadHistory(filepath.Join(goldenDir, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func checkReplay(t *testing.T, h *trellis.RecordedHistory, wfs ...trellis.Registrable) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return trellistest.CheckReplay(ctx, h, wfs...)
}

// failedVariant is a workflow named golden-failed that runs fn.
func failedVariant(fn func(wc *trellis.Context) (string, error)) *trellis.Workflow[struct{}, string] {
	return trellis.NewWorkflow("golden-failed", func(wc *trellis.Context, _ struct{}) (string, error) { return fn(wc) })
}

func TestReplayRenamedStepIsNonDeterministic(t *testing.T) {
	t.Parallel()
	var ran atomic.Int32
	renamed := failedVariant(func(wc *trellis.Context) (string, error) {
		return trellis.Step(wc, "doomed-v2", func(ctx context.Context) (string, error) { ran.Add(1); return "", nil })
	})
	err := checkReplay(t, loadGolden(t, "failed"), renamed)
	var nde *trellis.NonDeterminismError
	if !errors.As(err, &nde) || nde.Position != 0 || nde.Recorded != `step "doomed"` || nde.Requested != `step "doomed-v2"` {
		t.Fatalf("err = %v, want a non-determinism error at position 0", err)
	}
	if ran.Load() != 0 {
		t.Error("a step function ran during a replay")
	}
}

func TestReplayBeyondAFinishedHistory(t *testing.T) {
	t.Parallel()
	for name, fn := range map[string]func(wc *trellis.Context) (string, error){
		"step": func(wc *trellis.Context) (string, error) {
			_, _ = trellis.Step(wc, "doomed", func(ctx context.Context) (string, error) { return "", nil })
			return trellis.Step(wc, "extra", func(ctx context.Context) (string, error) { return "", nil })
		},
		"uuid": func(wc *trellis.Context) (string, error) {
			_, _ = trellis.Step(wc, "doomed", func(ctx context.Context) (string, error) { return "", nil })
			return wc.UUID(), errors.New("x")
		},
	} {
		err := checkReplay(t, loadGolden(t, "failed"), failedVariant(fn))
		var nde *trellis.NonDeterminismError
		if !errors.As(err, &nde) || nde.Position != 1 || !strings.Contains(nde.Recorded, "end of the history (the run failed)") {
			t.Errorf("%s: err = %v, want a non-determinism error past the history", name, err)
		}
	}
}

func TestReplayOtherOutcome(t *testing.T) {
	t.Parallel()
	swallow := failedVariant(func(wc *trellis.Context) (string, error) {
		_, _ = trellis.Step(wc, "doomed", func(ctx context.Context) (string, error) { return "", nil })
		return "fine", nil
	})
	err := checkReplay(t, loadGolden(t, "failed"), swallow)
	if !errors.Is(err, trellistest.ErrReplayOutcome) || !strings.Contains(err.Error(), "the recorded run failed") {
		t.Fatalf("err = %v, want ErrReplayOutcome", err)
	}
	h := loadGolden(t, "steps")
	h.Run.Output = trellis.Payload(`{"other":1}`)
	if err := checkReplay(t, h, goldenSteps); !errors.Is(err, trellistest.ErrReplayOutcome) {
		t.Fatalf("err = %v, want ErrReplayOutcome for another output", err)
	}
}

func TestReplayUnknownWorkflow(t *testing.T) {
	t.Parallel()
	if err := checkReplay(t, loadGolden(t, "steps"), goldenWaits); err == nil || !strings.Contains(err.Error(), `"golden-steps" is not among`) {
		t.Fatalf("err = %v", err)
	}
}

// An unfinished run replays up to the end of its history; what the code does
// after that is not checked, and no step function runs.
func TestReplayUnfinishedRun(t *testing.T) {
	t.Parallel()
	env := trellistest.New(t, trellistest.Options{Workflows: []trellis.Registrable{slowOrder}})
	h := trellistest.Start(env, slowOrder, order{ID: "o-9"})
	env.Advance(24 * time.Hour)
	exported := env.ExportHistory(h.RunID())
	b, _ := json.Marshal(exported)
	back, err := trellis.ParseHistory(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Run.Status != trellis.StatusWaiting || len(back.Ops) != 2 {
		t.Fatalf("exported %+v", back)
	}
	trellistest.Replay(t, back, slowOrder)
	var ran atomic.Int32
	changed := trellis.NewWorkflow("slow-order", func(wc *trellis.Context, o order) (string, error) {
		if err := wc.Sleep(24 * time.Hour); err != nil {
			return "", err
		}
		return trellis.Step(wc, "new-step", func(ctx context.Context) (string, error) { ran.Add(1); return "", nil })
	})
	err = checkReplay(t, back, changed)
	var nde *trellis.NonDeterminismError
	if !errors.As(err, &nde) || nde.Position != 1 || nde.Recorded != `event "paid"` {
		t.Fatalf("err = %v, want a non-determinism error at the event", err)
	}
	if ran.Load() != 0 {
		t.Error("a step function ran during a replay")
	}
}
