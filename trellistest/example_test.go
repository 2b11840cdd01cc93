package trellistest_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/trellistest"
)

// In a test, pass the test's *testing.T to New and Replay. These examples run
// outside a test, so they use exampleT, a stand-in that prints failures.
type exampleT struct {
	dir      string
	cleanups []func()
}

func newExampleT() *exampleT {
	dir, err := os.MkdirTemp("", "trellistest-example")
	if err != nil {
		panic(err)
	}
	return &exampleT{dir: dir}
}

func (t *exampleT) Helper()                           {}
func (t *exampleT) TempDir() string                   { return t.dir }
func (t *exampleT) Cleanup(f func())                  { t.cleanups = append(t.cleanups, f) }
func (t *exampleT) Errorf(format string, args ...any) { fmt.Printf("FAIL: "+format+"\n", args...) }
func (t *exampleT) Fatalf(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }

// done runs the cleanups, as the end of a test does.
func (t *exampleT) done() {
	for i := len(t.cleanups) - 1; i >= 0; i-- {
		t.cleanups[i]()
	}
	os.RemoveAll(t.dir)
}

var trial = trellis.NewWorkflow("trial", func(wc *trellis.Context, user string) (string, error) {
	if err := wc.Sleep(14 * 24 * time.Hour); err != nil { // a two-week trial
		return "", err
	}
	plan, err := trellis.WaitEvent[string](wc, "plan-chosen", 24*time.Hour)
	if errors.Is(err, trellis.ErrEventTimeout) {
		plan = "free"
	} else if err != nil {
		return "", err
	}
	return trellis.Step(wc, "bill", func(ctx context.Context) (string, error) {
		return "billed " + user + " for " + plan, nil
	})
})

// A workflow that sleeps two weeks and waits a day for an event runs in
// milliseconds: the test moves the fake clock and sends the event.
func ExampleNew() {
	t := newExampleT()
	defer t.done()

	env := trellistest.New(t, trellistest.Options{Workflows: []trellis.Registrable{trial}})
	h := trellistest.Start(env, trial, "ada")
	env.Advance(14 * 24 * time.Hour)
	env.SendEvent(h.RunID(), "plan-chosen", "pro")
	out, err := trellistest.Result(env, h)
	fmt.Println(out, err)
	fmt.Println("fake time passed:", env.Now().Sub(trellistest.DefaultStart))
	// Output:
	// billed ada for pro <nil>
	// fake time passed: 336h0m0s
}

// Result skips time: with no event sent, the wait times out after a day of
// fake time, and the mocked step runs instead of the real one.
func ExampleEnv_OverrideStep() {
	t := newExampleT()
	defer t.done()

	env := trellistest.New(t, trellistest.Options{Workflows: []trellis.Registrable{trial}})
	env.OverrideStep("bill", func(ctx context.Context) (string, error) {
		return "mock bill", nil
	})
	h := trellistest.Start(env, trial, "ada")
	out, err := trellistest.Result(env, h)
	fmt.Println(out, err)
	for _, op := range env.History(h.RunID()) {
		fmt.Println(op.Position, op.Kind, op.Name, op.Error != nil)
	}
	// Output:
	// mock bill <nil>
	// 0 timer  false
	// 1 event plan-chosen true
	// 2 step bill false
}

// Replay checks that today's code still replays a run recorded earlier
// (`trellis runs history RUN --json > run.json`). Renaming a step breaks it.
func ExampleReplay() {
	t := newExampleT()
	defer t.done()

	// Record a run (in a real project: a file exported from production).
	env := trellistest.New(t, trellistest.Options{Workflows: []trellis.Registrable{trial}})
	h := trellistest.Start(env, trial, "ada")
	if _, err := trellistest.Result(env, h); err != nil {
		fmt.Println(err)
	}
	history := env.ExportHistory(h.RunID())

	trellistest.Replay(t, history, trial) // today's code: fine

	renamed := trellis.NewWorkflow("trial", func(wc *trellis.Context, user string) (string, error) {
		if err := wc.Sleep(14 * 24 * time.Hour); err != nil {
			return "", err
		}
		_, _ = trellis.WaitEvent[string](wc, "plan-chosen", 24*time.Hour)
		return trellis.Step(wc, "charge", func(ctx context.Context) (string, error) { return "", nil })
	})
	err := trellistest.CheckReplay(context.Background(), history, renamed)
	var nde *trellis.NonDeterminismError
	if errors.As(err, &nde) {
		fmt.Println(nde.Position, nde.Recorded, "->", nde.Requested)
	}
	fmt.Println(strings.Contains(err.Error(), "non-determinism"))
	// Output:
	// 2 step "bill" -> step "charge"
	// true
}
