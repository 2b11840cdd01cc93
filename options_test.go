package trellis_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/trellis-dev/trellis"
)

// Every function that takes its options as a variadic argument refuses a
// second options value, naming the call, instead of dropping it; nothing is
// started, scheduled or recorded.
func TestOptionsRefused(t *testing.T) {
	t.Parallel()
	child := trellis.NewWorkflow("options-child", func(wc *trellis.Context, n int) (int, error) { return n, nil })
	job := trellis.NewJob("options-job", func(ctx context.Context, n int) (int, error) { return n, nil })
	two := []trellis.StepOptions{{}, {Timeout: 1}}
	// refused reports what the call inside the workflow returned.
	refused := func(err error) (string, error) {
		if !errors.Is(err, trellis.ErrInvalidOptions) {
			return "", fmt.Errorf("not ErrInvalidOptions: %v", err)
		}
		return err.Error(), nil
	}
	inside := map[string]func(wc *trellis.Context) (string, error){
		"Step": func(wc *trellis.Context) (string, error) {
			_, err := trellis.Step(wc, "s", func(context.Context) (int, error) { return 1, nil }, two...)
			return refused(err)
		},
		"Async": func(wc *trellis.Context) (string, error) {
			_, err := trellis.Async(wc, "s", func(context.Context) (int, error) { return 1, nil }, two...).Get(wc)
			return refused(err)
		},
		"TxStep": func(wc *trellis.Context) (string, error) {
			_, err := trellis.TxStep(wc, "s", func(context.Context, any) (int, error) { return 1, nil }, two...)
			return refused(err)
		},
		"Child": func(wc *trellis.Context) (string, error) {
			_, err := trellis.Child(wc, child, 1, trellis.ChildOptions{}, trellis.ChildOptions{Detached: true})
			return refused(err)
		},
		"ChildAsync": func(wc *trellis.Context) (string, error) {
			f := trellis.ChildAsync(wc, child, 1, trellis.ChildOptions{}, trellis.ChildOptions{}, trellis.ChildOptions{})
			_, err := f.Get(wc)
			return refused(err)
		},
		"Map": func(wc *trellis.Context) (string, error) {
			_, err := trellis.Map(wc, child, []int{1, 2}, trellis.MapOptions{}, trellis.MapOptions{MaxConcurrency: 1})
			return refused(err)
		},
	}
	want := map[string]string{
		"Step":       `step "s": trellis.Step: 2 StepOptions given; pass at most one`,
		"Async":      `step "s": trellis.Async: 2 StepOptions given; pass at most one`,
		"TxStep":     `step "s": trellis.TxStep: 2 StepOptions given; pass at most one`,
		"Child":      `trellis.Child: 2 ChildOptions given; pass at most one`,
		"ChildAsync": `trellis.ChildAsync: 3 ChildOptions given; pass at most one`,
		"Map":        `trellis.Map: 2 MapOptions given; pass at most one`,
	}
	wfs := []trellis.Registrable{child, job}
	byName := map[string]*trellis.Workflow[int, string]{}
	for name, f := range inside {
		byName[name] = trellis.NewWorkflow("options-"+name, func(wc *trellis.Context, _ int) (string, error) { return f(wc) })
		wfs = append(wfs, byName[name])
	}
	c := setup(t, wfs...)
	ctx := ctxT(t)

	for name, wf := range byName {
		h := must[*trellis.Handle[string]](t)(trellis.Start(ctx, c, wf, 0))
		if got := mustResult(t, h); got != want[name] {
			t.Errorf("%s with extra options: %q, want %q", name, got, want[name])
		}
		if ops := must[[]*trellis.Op](t)(c.History(ctx, h.RunID())); len(ops) != 0 {
			t.Errorf("%s with extra options recorded %d ops, want none", name, len(ops))
		}
	}

	calls := map[string]func() error{
		"trellis.Start: 2 StartOptions given; pass at most one": func() error {
			_, err := trellis.Start(ctx, c, child, 1, trellis.StartOptions{ID: "a"}, trellis.StartOptions{ID: "b"})
			return err
		},
		"trellis.StartJob: 2 StartOptions given; pass at most one": func() error {
			_, err := trellis.StartJob(ctx, c, job, 1, trellis.StartOptions{ID: "a"}, trellis.StartOptions{ID: "b"})
			return err
		},
		"Client.CreateSchedule: 2 CreateScheduleOptions given; pass at most one": func() error {
			_, err := c.CreateSchedule(ctx, "options", trellis.ScheduleSpec{Cron: "0 * * * *", Workflow: child.Name()},
				trellis.CreateScheduleOptions{}, trellis.CreateScheduleOptions{Paused: true})
			return err
		},
	}
	for msg, call := range calls {
		if err := call(); !errors.Is(err, trellis.ErrInvalidOptions) || err.Error() != msg {
			t.Errorf("%v, want %q (ErrInvalidOptions)", err, msg)
		}
	}
	page := must[*trellis.RunPage](t)(c.List(ctx, trellis.ListOptions{Workflow: child.Name()}))
	if len(page.Runs) != 0 {
		t.Errorf("refused starts created %d runs", len(page.Runs))
	}
	if page := must[*trellis.RunPage](t)(c.List(ctx, trellis.ListOptions{Workflow: job.Name()})); len(page.Runs) != 0 {
		t.Errorf("refused job starts created %d runs", len(page.Runs))
	}
	if _, err := c.GetSchedule(ctx, "options"); !errors.Is(err, trellis.ErrScheduleNotFound) {
		t.Errorf("refused schedule: GetSchedule = %v, want ErrScheduleNotFound", err)
	}
	// One options value, or none, is taken as before.
	h := must[*trellis.Handle[int]](t)(trellis.Start(ctx, c, child, 7, trellis.StartOptions{ID: "one"}))
	if got := mustResult(t, h); got != 7 {
		t.Errorf("result %d, want 7", got)
	}
}

// StartTx refuses a second options value before it touches the transaction.
func TestOptionsRefusedStartTx(t *testing.T) {
	t.Parallel()
	db := sqliteUserDB(t)
	wf := trellis.NewWorkflow("options-tx", func(wc *trellis.Context, n int) (int, error) { return n, nil })
	c := open(t, db.url)
	register(t, c, wf)
	ctx := ctxT(t)
	tx, commit, _ := db.begin(t)
	_, err := trellis.StartTx(ctx, c, tx, wf, 1, trellis.StartOptions{}, trellis.StartOptions{})
	if !errors.Is(err, trellis.ErrInvalidOptions) || err.Error() != "trellis.StartTx: 2 StartOptions given; pass at most one" {
		t.Fatalf("StartTx with two options: %v", err)
	}
	if err := commit(); err != nil {
		t.Fatal(err)
	}
	if page := must[*trellis.RunPage](t)(c.List(ctx, trellis.ListOptions{})); len(page.Runs) != 0 {
		t.Fatalf("refused StartTx created %d runs", len(page.Runs))
	}
}

// The constructors that return no error panic at the definition, with an
// ErrInvalidOptions error that names them.
func TestOptionsRefusedAtDefinition(t *testing.T) {
	t.Parallel()
	for name, define := range map[string]func(){
		"trellis.NewWorkflow: 2 WorkflowOptions given; pass at most one": func() {
			trellis.NewWorkflow("w", func(*trellis.Context, int) (int, error) { return 0, nil },
				trellis.WorkflowOptions{}, trellis.WorkflowOptions{Version: 2})
		},
		"trellis.NewJob: 2 JobOptions given; pass at most one": func() {
			trellis.NewJob("j", func(context.Context, int) (int, error) { return 0, nil }, trellis.JobOptions{}, trellis.JobOptions{})
		},
	} {
		func() {
			defer func() {
				err, _ := recover().(error)
				if !errors.Is(err, trellis.ErrInvalidOptions) || err.Error() != name {
					t.Errorf("panic %v, want %q (ErrInvalidOptions)", err, name)
				}
			}()
			define()
		}()
	}
}
