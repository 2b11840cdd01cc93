package trellis_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/trellis-dev/trellis"
)

// Emit publishes events on the run's stream, beside its lifecycle events;
// Client.Stream follows the stream live, from any sequence, and ends after the
// run's final event.
func ExampleEmit() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	export := trellis.NewWorkflow("export", func(wc *trellis.Context, rows int) (int, error) {
		for done := 100; done <= rows; done += 100 {
			if err := trellis.Emit(wc, "progress", map[string]int{"rows": done}); err != nil {
				return 0, err
			}
		}
		return rows, nil
	})
	if err := db.Register(ctx, export); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, export, 300, trellis.StartOptions{ID: "export-1"})
	if err != nil {
		panic(err)
	}
	for ev, err := range db.Stream(ctx, h.RunID(), 0) {
		if err != nil {
			panic(err)
		}
		fmt.Println(ev.Sequence, ev.Name, string(ev.Data))
	}
	// Output:
	// 1 run.started {"attempt":1,"workflow":"export"}
	// 2 progress {"rows":100}
	// 3 progress {"rows":200}
	// 4 progress {"rows":300}
	// 5 run.succeeded {"result":300}
}

// A job is a run with one step and no replay: one claim, one call, one write of
// its outcome, with retries and leases as for any run.
func ExampleNewJob() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	tries := 0
	resize := trellis.NewJob("resize", func(ctx context.Context, img string) (string, error) {
		tries++
		if tries == 1 {
			return "", errors.New("out of memory")
		}
		return strings.TrimSuffix(img, ".png") + "-thumb.png", nil
	}, trellis.JobOptions{Retry: trellis.RetryPolicy{MaxAttempts: 3, Backoff: trellis.Fixed(time.Millisecond)}})
	if err := db.Register(ctx, resize); err != nil {
		panic(err)
	}
	h, err := trellis.StartJob(ctx, db, resize, "cat.png")
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	fmt.Println("tries:", tries)
	// Output:
	// cat-thumb.png <nil>
	// tries: 2
}

// A paused queue still accepts runs; nobody claims them until it is resumed.
// Queue records also carry limits every worker obeys (concurrency, per-key
// concurrency, starts per second).
func ExampleClient_PauseQueue() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	limit := 20
	if _, err := db.CreateQueue(ctx, "emails", trellis.QueueSettings{ConcurrencyLimit: &limit}); err != nil {
		panic(err)
	}
	send := trellis.NewWorkflow("send", func(wc *trellis.Context, to string) (string, error) {
		return "sent to " + to, nil
	}, trellis.WorkflowOptions{Queue: "emails"})
	if err := db.Register(ctx, send); err != nil {
		panic(err)
	}
	if _, err := db.PauseQueue(ctx, "emails"); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, send, "ada@example.com", trellis.StartOptions{ID: "mail-1"})
	if err != nil {
		panic(err)
	}
	time.Sleep(50 * time.Millisecond)
	run, _ := db.Get(ctx, "mail-1")
	fmt.Println(run.Queue, run.Status)

	q, err := db.ResumeQueue(ctx, "emails")
	if err != nil {
		panic(err)
	}
	fmt.Println("paused:", q.Paused, "limit:", q.ConcurrencyLimit)
	fmt.Println(h.Result(ctx))
	// Output:
	// emails pending
	// paused: false limit: 20
	// sent to ada@example.com <nil>
}

// A namespace isolates runs: a client sees the runs of its Config.Namespace
// only. A namespace record adds a retention period, a default queue and a
// payload limit.
func ExampleClient_CreateNamespace() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	url := "sqlite://" + filepath.Join(dir, "trellis.db")
	admin, err := trellis.Open(ctx, trellis.Config{Store: url, Worker: trellis.WorkerOptions{Disabled: true}})
	if err != nil {
		panic(err)
	}
	defer admin.Close()
	retention := trellis.Duration(7 * 24 * time.Hour)
	ns, err := admin.CreateNamespace(ctx, trellis.NamespaceOptions{Name: "tenant-a", Retention: retention})
	if err != nil {
		panic(err)
	}
	fmt.Println(ns.Name, time.Duration(ns.Retention))

	tenant, err := trellis.Open(ctx, trellis.Config{Store: url, Namespace: "tenant-a"})
	if err != nil {
		panic(err)
	}
	defer tenant.Close()
	echo := trellis.NewWorkflow("echo", func(wc *trellis.Context, s string) (string, error) { return s, nil })
	if err := tenant.Register(ctx, echo); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, tenant, echo, "hi", trellis.StartOptions{ID: "echo-1"})
	if err != nil {
		panic(err)
	}
	h.Result(ctx)
	_, err = admin.Get(ctx, "echo-1") // the default namespace has no such run
	fmt.Println(errors.Is(err, trellis.ErrRunNotFound))
	// Output:
	// tenant-a 168h0m0s
	// true
}

// A schedule starts runs of a workflow on a cron expression in a time zone.
// TriggerSchedule starts one now; BackfillSchedule starts the runs of past
// ticks, each with the run ID its tick has (schedule name and fire time), so
// no tick runs twice.
func ExampleClient_CreateSchedule() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	report := trellis.NewWorkflow("report", func(wc *trellis.Context, kind string) (string, error) {
		return kind + " report", nil
	})
	if err := db.Register(ctx, report); err != nil {
		panic(err)
	}
	s, err := db.CreateSchedule(ctx, "nightly", trellis.ScheduleSpec{
		Workflow: "report", Input: trellis.Payload(`"sales"`),
		Cron: "0 2 * * *", TimeZone: "Europe/Berlin",
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(s.Name, s.Spec.Cron, s.Spec.Overlap)

	run, err := db.TriggerSchedule(ctx, "nightly")
	if err != nil {
		panic(err)
	}
	run, _ = db.Wait(ctx, run.ID)
	fmt.Println(run.Status, string(run.Output))

	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	runs, err := db.BackfillSchedule(ctx, "nightly", start, start.AddDate(0, 0, 3))
	if err != nil {
		panic(err)
	}
	for _, r := range runs {
		fmt.Println(r.WorkflowID)
	}
	// Output:
	// nightly 0 2 * * * skip
	// succeeded "sales report"
	// sched-nightly-20260301T010000Z
	// sched-nightly-20260302T010000Z
	// sched-nightly-20260303T010000Z
}

// A workflow retry policy attempts a failed run again after a backoff:
// succeeded steps replay, the failed ones run again with a fresh budget.
func ExampleWorkflowOptions_retry() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	reserves := 0
	trip := trellis.NewWorkflow("trip", func(wc *trellis.Context, city string) (string, error) {
		if _, err := trellis.Step(wc, "reserve", func(ctx context.Context) (bool, error) {
			reserves++
			return true, nil
		}); err != nil {
			return "", err
		}
		if wc.WorkflowAttempt() == 1 {
			return "", errors.New("hotel API down") // the workflow function fails
		}
		return fmt.Sprintf("booked %s on attempt %d", city, wc.WorkflowAttempt()), nil
	}, trellis.WorkflowOptions{
		Retry: &trellis.RetryPolicy{MaxAttempts: 3, Backoff: trellis.Fixed(10 * time.Millisecond)},
	})
	if err := db.Register(ctx, trip); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, trip, "Lisbon", trellis.StartOptions{ID: "trip-lis"})
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	run, _ := db.Get(ctx, "trip-lis")
	fmt.Println(run.WorkflowAttempt, run.WorkflowAttempts[0].Error.Message, "reserves:", reserves)
	// Output:
	// booked Lisbon on attempt 2 <nil>
	// 2 hotel API down reserves: 1
}

// A run keeps the version it started with for life; a start pinned to a version
// (StartOptions.Version) runs only on a worker that serves it.
func ExampleWorkflowOptions_version() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	checkout := trellis.NewWorkflow("checkout", func(wc *trellis.Context, cart string) (string, error) {
		if wc.Version() >= 3 {
			return cart + ": with fraud check", nil
		}
		return cart + ": old path", nil
	}, trellis.WorkflowOptions{Version: 3, AlsoServes: []int{2}})
	if err := db.Register(ctx, checkout); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, checkout, "cart-1")
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	old, err := trellis.Start(ctx, db, checkout, "cart-2", trellis.StartOptions{Version: 2})
	if err != nil {
		panic(err)
	}
	fmt.Println(old.Result(ctx))

	// No worker serves version 4: the run waits, and says why.
	v4, err := trellis.Start(ctx, db, checkout, "cart-3", trellis.StartOptions{ID: "cart-3", Version: 4})
	if err != nil {
		panic(err)
	}
	run, _ := db.Get(ctx, v4.ID())
	fmt.Println(run.Status, run.Version, run.Pinned)
	// Output:
	// cart-1: with fraud check <nil>
	// cart-2: old path <nil>
	// pending 4 true
}

// When the code asks for a different op than a run's history holds, the run is
// blocked with an error naming the position and both ops; deploy the fix and
// Resume it.
func ExampleClient_Resume() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	url := "sqlite://" + filepath.Join(dir, "trellis.db")
	step := func(name string) func(wc *trellis.Context, _ struct{}) (string, error) {
		return func(wc *trellis.Context, _ struct{}) (string, error) {
			if _, err := trellis.Step(wc, name, func(ctx context.Context) (int, error) { return 1, nil }); err != nil {
				return "", err
			}
			return trellis.WaitEvent[string](wc, "go", 0)
		}
	}

	// Version 1 of the code records step "a", then waits.
	v1, err := trellis.Open(ctx, trellis.Config{Store: url})
	if err != nil {
		panic(err)
	}
	wf := trellis.NewWorkflow("flow", step("a"))
	v1.Register(ctx, wf)
	trellis.Start(ctx, v1, wf, struct{}{}, trellis.StartOptions{ID: "flow-1"})
	for {
		if run, _ := v1.Get(ctx, "flow-1"); run.Status != trellis.StatusPending && run.Status != trellis.StatusRunning {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	v1.Close()

	// A deploy renames the step: the run's history no longer matches.
	v2, err := trellis.Open(ctx, trellis.Config{Store: url})
	if err != nil {
		panic(err)
	}
	v2.Register(ctx, trellis.NewWorkflow("flow", step("b")))
	v2.SendEvent(ctx, "flow-1", "go", "now")
	for {
		if run, _ := v2.Get(ctx, "flow-1"); run.Status != trellis.StatusPending && run.Status != trellis.StatusRunning && run.Status != trellis.StatusWaiting {
			fmt.Println(run.Status)
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	v2.Close()

	// The fix restores the step's name; Resume replays the run on it.
	v3, err := trellis.Open(ctx, trellis.Config{Store: url})
	if err != nil {
		panic(err)
	}
	defer v3.Close()
	v3.Register(ctx, wf)
	// Registering resumes blocked runs too, so by now the run may be running
	// again (not blocked) or even finished: both are fine here.
	if err := v3.Resume(ctx, "flow-1"); err != nil && !errors.Is(err, trellis.ErrRunNotBlocked) && !errors.Is(err, trellis.ErrRunFinished) {
		panic(err)
	}
	run, _ := v3.Wait(ctx, "flow-1")
	fmt.Println(run.Status, string(run.Output))
	// Output:
	// blocked
	// succeeded "now"
}

// Interceptors wrap workflow attempts, step attempts and client calls; the
// built-in logging, metrics and tracing are interceptors too.
func ExampleInterceptor() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	var steps []string
	audit := trellis.Interceptor{
		Step: func(ctx context.Context, s *trellis.StepCall, next func(context.Context) error) error {
			err := next(ctx)
			steps = append(steps, fmt.Sprintf("%s#%d err=%v", s.Step, s.Attempt, err))
			return err
		},
	}
	db, err := trellis.Open(ctx, trellis.Config{
		Store:        "sqlite://" + filepath.Join(dir, "trellis.db"),
		Interceptors: []trellis.Interceptor{audit},
	})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	wf := trellis.NewWorkflow("two-steps", func(wc *trellis.Context, _ struct{}) (int, error) {
		a, err := trellis.Step(wc, "a", func(ctx context.Context) (int, error) { return 1, nil })
		if err != nil {
			return 0, err
		}
		b, err := trellis.Step(wc, "b", func(ctx context.Context) (int, error) { return 2, nil })
		return a + b, err
	})
	if err := db.Register(ctx, wf); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, wf, struct{}{})
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	fmt.Println(steps)
	// Output:
	// 3 <nil>
	// [a#1 err=<nil> b#1 err=<nil>]
}

// ExportHistory returns a run and its history as a versioned JSON document
// (the one `trellis runs history RUN --json` prints), which ParseHistory reads
// back and trellistest.Replay replays against new code.
func ExampleClient_ExportHistory() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	wf := trellis.NewWorkflow("stamp", func(wc *trellis.Context, _ struct{}) (string, error) {
		id := wc.UUID() // recorded: the same value on every replay
		return trellis.Step(wc, "save", func(ctx context.Context) (string, error) {
			return fmt.Sprint("saved, key of ", len(id), " characters"), nil
		})
	})
	if err := db.Register(ctx, wf); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, wf, struct{}{}, trellis.StartOptions{ID: "stamp-1"})
	if err != nil {
		panic(err)
	}
	h.Result(ctx)
	exported, err := db.ExportHistory(ctx, "stamp-1")
	if err != nil {
		panic(err)
	}
	doc, _ := json.Marshal(exported)
	parsed, err := trellis.ParseHistory(doc)
	if err != nil {
		panic(err)
	}
	fmt.Println(parsed.Format, parsed.Run.Workflow, parsed.Run.Status)
	for _, op := range parsed.Ops {
		fmt.Println(op.Position, op.Kind, op.Name, string(op.Result) != "")
	}
	// Output:
	// trellis.history/v1 stamp succeeded
	// 0 uuid  true
	// 1 step save true
}
