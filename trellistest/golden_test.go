package trellistest_test

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/trellistest"
)

// The golden histories in testdata/replay were recorded from real runs of the
// workflows below (go test ./trellistest -run TestGoldenHistories -update). They
// must keep replaying: an engine change that breaks them breaks the runs in
// flight of every user. Change these workflows only together with new goldens,
// and never to make an engine change pass.
var update = flag.Bool("update", false, "record the golden histories of testdata/replay again")

const goldenDir = "testdata/replay"

var goldenDouble = trellis.NewWorkflow("golden-double", func(wc *trellis.Context, n int) (int, error) {
	return trellis.Step(wc, "double", func(ctx context.Context) (int, error) { return 2 * n, nil })
})

// goldenSteps: a step with failed attempts, async steps, now, uuid, random, a
// patch, set and delete, a transactional step.
var goldenSteps = trellis.NewWorkflow("golden-steps", func(wc *trellis.Context, in string) (map[string]any, error) {
	flaky, err := trellis.Step(wc, "flaky", func(ctx context.Context) (string, error) {
		if a := trellis.StepInfo(ctx).Attempt; a < 3 {
			return "", fmt.Errorf("attempt %d fails", a)
		}
		return "ok:" + in, nil
	}, trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 5}})
	if err != nil {
		return nil, err
	}
	a := trellis.Async(wc, "left", func(ctx context.Context) (int, error) { return 1, nil })
	b := trellis.Async(wc, "right", func(ctx context.Context) (int, error) { return 2, nil })
	l, err1 := a.Get(wc)
	r, err2 := b.Get(wc)
	if err := errors.Join(err1, err2); err != nil {
		return nil, err
	}
	now, id, rnd := wc.Now(), wc.UUID(), wc.Random()
	patched := wc.Patched("v2-audit")
	if err := wc.Set("seen", flaky); err != nil {
		return nil, err
	}
	wc.Delete("seen")
	tx, err := trellis.TxStep(wc, "tx", func(ctx context.Context, tx any) (string, error) { return "committed", nil })
	if err != nil {
		return nil, err
	}
	return map[string]any{"flaky": flaky, "sum": l + r, "now": now, "uuid": id, "random": rnd, "patched": patched, "tx": tx}, nil
})

// goldenWaits: a durable timer, an event received, an event wait that times
// out, an approval, a select.
var goldenWaits = trellis.NewWorkflow("golden-waits", func(wc *trellis.Context, _ struct{}) (string, error) {
	if err := wc.Sleep(time.Hour); err != nil {
		return "", err
	}
	got, err := trellis.WaitEvent[string](wc, "go", 0)
	if err != nil {
		return "", err
	}
	if _, err := trellis.WaitEvent[string](wc, "never", 10*time.Minute); !errors.Is(err, trellis.ErrEventTimeout) {
		return "", fmt.Errorf("want a timeout, got %v", err)
	}
	d, err := trellis.Approval(wc, "boss", trellis.ApprovalOptions{Subject: "go on?"})
	if err != nil {
		return "", err
	}
	ev := trellis.OnEvent[string](wc, "late", 0)
	timer := wc.NewTimer(time.Minute)
	winner, err := trellis.Select(wc, ev, timer)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("%s approved=%v by %s winner=%d", got, d.Approved, d.Principal, winner), nil
})

// goldenChildren: one child and a Map.
var goldenChildren = trellis.NewWorkflow("golden-children", func(wc *trellis.Context, n int) ([]int, error) {
	one, err := trellis.Child(wc, goldenDouble, n)
	if err != nil {
		return nil, err
	}
	many, err := trellis.Map(wc, goldenDouble, []int{1, 2, 3}, trellis.MapOptions{MaxConcurrency: 2})
	if err != nil {
		return nil, err
	}
	return append([]int{one}, many...), nil
})

// goldenFailed: a run that fails on a non-retryable step error.
var goldenFailed = trellis.NewWorkflow("golden-failed", func(wc *trellis.Context, _ struct{}) (string, error) {
	return trellis.Step(wc, "doomed", func(ctx context.Context) (string, error) {
		return "", trellis.NonRetryable(errors.New("card declined"))
	})
})

// goldenCancelled: a run cancelled during a sleep, which releases what it
// reserved in a detached step.
var goldenCancelled = trellis.NewWorkflow("golden-cancelled", func(wc *trellis.Context, _ struct{}) (string, error) {
	if _, err := trellis.Step(wc, "reserve", func(ctx context.Context) (string, error) { return "seat-1", nil }); err != nil {
		return "", err
	}
	if err := wc.Sleep(time.Hour); err != nil {
		_, _ = trellis.Step(wc.Detached(), "release", func(ctx context.Context) (bool, error) { return true, nil })
		return "", err
	}
	return "kept", nil
})

var goldenWorkflows = []trellis.Registrable{goldenDouble, goldenSteps, goldenWaits, goldenChildren, goldenFailed, goldenCancelled}

// recordGoldens runs each golden workflow to its end and writes its history.
func recordGoldens(t *testing.T) {
	env := trellistest.New(t, trellistest.Options{Workflows: goldenWorkflows})
	runs := map[string]string{}
	h1 := trellistest.Start(env, goldenSteps, "in", trellis.StartOptions{ID: "golden-steps"})
	h2 := trellistest.Start(env, goldenWaits, struct{}{}, trellis.StartOptions{ID: "golden-waits"})
	h3 := trellistest.Start(env, goldenChildren, 5, trellis.StartOptions{ID: "golden-children"})
	h4 := trellistest.Start(env, goldenFailed, struct{}{}, trellis.StartOptions{ID: "golden-failed"})
	h5 := trellistest.Start(env, goldenCancelled, struct{}{}, trellis.StartOptions{ID: "golden-cancelled"})
	env.Settle()
	if err := env.Client().Cancel(context.Background(), h5.RunID()); err != nil {
		t.Fatal(err)
	}
	env.SendEvent(h2.RunID(), "go", "green")
	env.Advance(time.Hour)
	env.Advance(10 * time.Minute) // the "never" event times out
	env.Approve(h2.RunID(), "boss")
	for name, id := range map[string]string{"steps": h1.RunID(), "waits": h2.RunID(), "children": h3.RunID(), "failed": h4.RunID(), "cancelled": h5.RunID()} {
		env.Finish(id)
		runs[name] = id
	}
	if err := os.MkdirAll(goldenDir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, id := range runs {
		b, err := json.MarshalIndent(env.ExportHistory(id), "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(goldenDir, name+".json"), append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGoldenHistories(t *testing.T) {
	if *update {
		recordGoldens(t)
	}
	files, err := filepath.Glob(filepath.Join(goldenDir, "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no golden histories in %s (%v): record them with -update", goldenDir, err)
	}
	kinds := map[string]bool{}
	for _, f := range files {
		h, err := trellistest.LoadHistory(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, op := range h.Ops {
			kinds[string(op.Kind)] = true
		}
		t.Run(strings.TrimSuffix(filepath.Base(f), ".json"), func(t *testing.T) {
			trellistest.Replay(t, h, goldenWorkflows...)
		})
	}
	for _, k := range []string{"step", "now", "uuid", "random", "patch", "set", "delete", "timer", "event", "approval", "child", "select"} {
		if !kinds[k] {
			t.Errorf("no golden history holds an op of kind %q", k)
		}
	}
}
