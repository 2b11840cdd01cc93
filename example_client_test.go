package trellis_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/trellis-dev/trellis"
)

// Cancel stops a run at its next op and cancels its running step's context;
// Detached lets the workflow run cleanup steps after that.
func ExampleClient_Cancel() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	booking := trellis.NewWorkflow("booking", func(wc *trellis.Context, trip string) (string, error) {
		if _, err := trellis.Step(wc, "reserve", func(ctx context.Context) (string, error) { return "seat 12A", nil }); err != nil {
			return "", err
		}
		_, err := trellis.WaitEvent[bool](wc, "confirmed", 0) // cancelled while it waits
		if errors.Is(err, trellis.ErrCancelled) {
			cleanup := wc.Detached() // ops still run on a cancelled run
			_, cerr := trellis.Step(cleanup, "release", func(ctx context.Context) (string, error) { return "released 12A", nil })
			return "", errors.Join(err, cerr)
		}
		return "booked " + trip, err
	})
	if err := db.Register(ctx, booking); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, booking, "LIS-BER", trellis.StartOptions{ID: "trip-1"})
	if err != nil {
		panic(err)
	}
	for { // until the run waits for its event
		if run, _ := db.Get(ctx, "trip-1"); run.Status != trellis.StatusPending && run.Status != trellis.StatusRunning {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := db.Cancel(ctx, "trip-1"); err != nil {
		panic(err)
	}
	_, err = h.Result(ctx)
	fmt.Println(errors.Is(err, trellis.ErrCancelled))
	history, _ := db.History(ctx, "trip-1")
	for _, op := range history {
		fmt.Println(op.Kind, op.Name)
	}
	// Output:
	// true
	// step reserve
	// event confirmed
	// step release
}

// Reset recovers a finished run: a new run with the same workflow ID and input
// keeps what the old one recorded before the named step and executes again
// from there (after the fix is deployed).
func ExampleClient_Reset() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	fixed := false // the deploy that fixes "convert"
	downloads, converts := 0, 0
	media := trellis.NewWorkflow("media", func(wc *trellis.Context, file string) (string, error) {
		raw, err := trellis.Step(wc, "download", func(ctx context.Context) (string, error) {
			downloads++
			return "raw " + file, nil
		})
		if err != nil {
			return "", err
		}
		return trellis.Step(wc, "convert", func(ctx context.Context) (string, error) {
			converts++
			if !fixed {
				return "", trellis.NonRetryable(errors.New("codec missing"))
			}
			return "mp4 of " + raw, nil
		})
	})
	if err := db.Register(ctx, media); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, media, "talk.mov", trellis.StartOptions{ID: "media-1"})
	if err != nil {
		panic(err)
	}
	_, err = h.Result(ctx)
	fmt.Println("first run:", err != nil)

	fixed = true
	run, err := db.Reset(ctx, "media-1", "convert")
	if err != nil {
		panic(err)
	}
	run, err = db.Wait(ctx, run.ID)
	if err != nil {
		panic(err)
	}
	fmt.Println(run.Status, string(run.Output))
	fmt.Println("downloads:", downloads, "converts:", converts)
	// Output:
	// first run: true
	// succeeded "mp4 of raw talk.mov"
	// downloads: 1 converts: 2
}

// Set and Get keep run-scoped values, saved with the run's checkpoints;
// Client.Value reads one from outside, while the run is under way or after.
func ExampleClient_Value() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	onboard := trellis.NewWorkflow("onboard", func(wc *trellis.Context, user string) (int, error) {
		if err := wc.Set("stage", "account created"); err != nil {
			return 0, err
		}
		var stage string
		if _, err := wc.Get("stage", &stage); err != nil {
			return 0, err
		}
		return len(stage), wc.Set("stage", "welcome mail sent")
	})
	if err := db.Register(ctx, onboard); err != nil {
		panic(err)
	}
	h, err := trellis.Start(ctx, db, onboard, "ada", trellis.StartOptions{ID: "onboard-ada"})
	if err != nil {
		panic(err)
	}
	fmt.Println(h.Result(ctx))
	var stage string
	if err := db.Value(ctx, "onboard-ada", "stage", &stage); err != nil {
		panic(err)
	}
	fmt.Println(stage)
	err = db.Value(ctx, "onboard-ada", "no-such-key", &stage)
	fmt.Println(errors.Is(err, trellis.ErrKeyNotFound))
	// Output:
	// 15 <nil>
	// welcome mail sent
	// true
}

// List filters runs by status, workflow, workflow ID, queue and creation time,
// a page at a time.
func ExampleClient_List() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	check := trellis.NewWorkflow("check", func(wc *trellis.Context, n int) (int, error) {
		if n%2 == 1 {
			return 0, trellis.NonRetryable(fmt.Errorf("%d is odd", n))
		}
		return n, nil
	})
	if err := db.Register(ctx, check); err != nil {
		panic(err)
	}
	for n := range 5 {
		h, err := trellis.Start(ctx, db, check, n, trellis.StartOptions{ID: fmt.Sprint("check-", n)})
		if err != nil {
			panic(err)
		}
		h.Result(ctx)
	}
	page, err := db.List(ctx, trellis.ListOptions{Statuses: []trellis.Status{trellis.StatusFailed}, Workflow: "check"})
	if err != nil {
		panic(err)
	}
	for _, r := range page.Runs {
		fmt.Println(r.WorkflowID, r.Status, r.Error.Message)
	}
	// Output:
	// check-3 failed 3 is odd
	// check-1 failed 1 is odd
}

// ReuseReturnExisting makes a start idempotent by workflow ID: a start repeated
// (a retried request, a message delivered twice) returns the run the first one
// created instead of starting another.
func ExampleReusePolicy() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	runs := 0
	welcome := trellis.NewWorkflow("welcome", func(wc *trellis.Context, user string) (string, error) {
		return trellis.Step(wc, "mail", func(ctx context.Context) (string, error) {
			runs++
			return "welcome mail to " + user, nil
		})
	})
	if err := db.Register(ctx, welcome); err != nil {
		panic(err)
	}
	opts := trellis.StartOptions{ID: "welcome-ada", Reuse: trellis.ReuseReturnExisting}
	first, err := trellis.Start(ctx, db, welcome, "ada", opts)
	if err != nil {
		panic(err)
	}
	first.Result(ctx)
	again, err := trellis.Start(ctx, db, welcome, "ada", opts) // the same request, delivered twice
	if err != nil {
		panic(err)
	}
	fmt.Println(again.Result(ctx))
	fmt.Println("same run:", first.RunID() == again.RunID(), "mails:", runs)

	// The default, ReuseRejectActive, refuses a second start while the first is
	// active; ReuseReject refuses it even after the first has finished.
	_, err = trellis.Start(ctx, db, welcome, "ada", trellis.StartOptions{ID: "welcome-ada", Reuse: trellis.ReuseReject})
	fmt.Println(errors.Is(err, trellis.ErrRunExists))
	// Output:
	// welcome mail to ada <nil>
	// same run: true mails: 1
	// true
}

// Errors of the client are sentinels to test with errors.Is, embedded and
// through a server alike.
func ExampleErrRunNotFound() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	_, err = db.Get(ctx, "no-such-run")
	fmt.Println(errors.Is(err, trellis.ErrRunNotFound))
	err = db.SendEvent(ctx, "no-such-run", "paid", true)
	fmt.Println(errors.Is(err, trellis.ErrRunNotFound))
	// Output:
	// true
	// true
}

// StartRaw starts a run by workflow name with encoded input, without the
// workflow's code; bad input is refused with ErrInvalidInput and starts nothing.
func ExampleClient_StartRaw() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	double := trellis.NewWorkflow("double", func(wc *trellis.Context, n int) (int, error) { return 2 * n, nil })
	if err := db.Register(ctx, double); err != nil {
		panic(err)
	}
	_, err = db.StartRaw(ctx, "double", []byte(`"twenty"`), trellis.StartOptions{ID: "double-1"})
	fmt.Println(errors.Is(err, trellis.ErrInvalidInput))

	run, err := db.StartRaw(ctx, "double", []byte(`21`), trellis.StartOptions{ID: "double-1"})
	if err != nil {
		panic(err)
	}
	run, err = db.Wait(ctx, run.ID)
	if err != nil {
		panic(err)
	}
	var out int
	json.Unmarshal(run.Output, &out)
	fmt.Println(run.Status, out)
	// Output:
	// true
	// succeeded 42
}

// GetHandle gives a typed handle on a run started elsewhere (by its run or
// workflow ID), e.g. in another request of a web service.
func ExampleGetHandle() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	report := trellis.NewWorkflow("report", func(wc *trellis.Context, month string) (Receipt, error) {
		return Receipt{Order: month, Charged: 31}, nil
	})
	if err := db.Register(ctx, report); err != nil {
		panic(err)
	}
	if _, err := trellis.Start(ctx, db, report, "2026-10", trellis.StartOptions{ID: "report-2026-10"}); err != nil {
		panic(err)
	}

	// Later, elsewhere:
	h, err := trellis.GetHandle(ctx, db, report, "report-2026-10")
	if err != nil {
		panic(err)
	}
	r, err := h.Result(ctx)
	fmt.Printf("%+v %v\n", r, err)
	// Output: {Order:2026-10 Charged:31 Emailed:false} <nil>
}

// StartAt delays a run: it waits in the store, pending, until it is due.
// Deadline bounds a run: once passed, no new step starts and the run fails with
// ErrDeadlineExceeded.
func ExampleStartOptions() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	slow := trellis.NewWorkflow("slow", func(wc *trellis.Context, _ struct{}) (string, error) {
		if err := wc.Sleep(time.Hour); err != nil {
			return "", err
		}
		return "done", nil
	})
	if err := db.Register(ctx, slow); err != nil {
		panic(err)
	}
	later, err := trellis.Start(ctx, db, slow, struct{}{}, trellis.StartOptions{
		ID:      "later",
		StartAt: time.Now().Add(time.Hour),
	})
	if err != nil {
		panic(err)
	}
	run, _ := db.Get(ctx, later.ID())
	fmt.Println(run.Status)

	h, err := trellis.Start(ctx, db, slow, struct{}{}, trellis.StartOptions{
		ID:       "bounded",
		Deadline: time.Now().Add(50 * time.Millisecond),
	})
	if err != nil {
		panic(err)
	}
	_, err = h.Result(ctx)
	fmt.Println(errors.Is(err, trellis.ErrDeadlineExceeded))
	// Output:
	// pending
	// true
}

// StartMany starts up to MaxStartMany runs in one transaction, each with its
// own outcome.
func ExampleClient_StartMany() {
	dir, _ := os.MkdirTemp("", "trellis-example")
	defer os.RemoveAll(dir)
	ctx := context.Background()
	db, err := trellis.Open(ctx, trellis.Config{Store: "sqlite://" + filepath.Join(dir, "trellis.db")})
	if err != nil {
		panic(err)
	}
	defer db.Close()

	greet := trellis.NewWorkflow("greet", func(wc *trellis.Context, name string) (string, error) { return "hi " + name, nil })
	if err := db.Register(ctx, greet); err != nil {
		panic(err)
	}
	if _, err := trellis.Start(ctx, db, greet, "bob", trellis.StartOptions{ID: "greet-bob"}); err != nil {
		panic(err)
	}
	var reqs []trellis.StartRequest
	for _, name := range []string{"ada", "bob", "cy"} {
		in, _ := json.Marshal(name)
		reqs = append(reqs, trellis.StartRequest{Workflow: "greet", Input: in,
			Options: trellis.StartOptions{ID: "greet-" + name, Reuse: trellis.ReuseReject}})
	}
	results, err := db.StartMany(ctx, reqs)
	if err != nil {
		panic(err)
	}
	for _, r := range results {
		fmt.Println(r.Created, r.Error != nil && errors.Is(r.Error, trellis.ErrRunExists))
	}
	// Output:
	// true false
	// false true
	// true false
}
