package trellistest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/trellistest"
)

type order struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

type receipt struct {
	Order  string `json:"order"`
	Charge string `json:"charge"`
}

// slowOrder sleeps a day, waits up to an hour for a payment event, then for a
// manager's approval, and charges.
var slowOrder = trellis.NewWorkflow("slow-order", func(wc *trellis.Context, o order) (receipt, error) {
	if err := wc.Sleep(24 * time.Hour); err != nil {
		return receipt{}, err
	}
	paid, err := trellis.WaitEvent[string](wc, "paid", time.Hour)
	if err != nil {
		return receipt{}, err
	}
	d, err := trellis.Approval(wc, "manager", trellis.ApprovalOptions{Subject: "ship " + o.ID})
	if err != nil {
		return receipt{}, err
	}
	if !d.Approved {
		return receipt{}, errors.New("rejected")
	}
	charge, err := trellis.Step(wc, "charge", func(ctx context.Context) (string, error) {
		return "real-charge-" + paid, nil
	})
	return receipt{Order: o.ID, Charge: charge}, err
})

func TestDayLongWorkflowInWallMilliseconds(t *testing.T) {
	t.Parallel()
	env := trellistest.New(t, trellistest.Options{Workflows: []trellis.Registrable{slowOrder}})
	began := time.Now()
	start := env.Now()
	h := trellistest.Start(env, slowOrder, order{ID: "o-1", Amount: 5})
	env.WaitStatus(h.RunID(), trellis.StatusWaiting)
	env.Advance(24 * time.Hour)
	if r := env.Get(h.RunID()); r.Status != trellis.StatusWaiting || !strings.Contains(r.WaitReason, `event "paid"`) {
		t.Fatalf("after a day: %s %q", r.Status, r.WaitReason)
	}
	env.SendEvent(h.RunID(), "paid", "card")
	env.Approve(h.RunID(), "manager")
	got, err := trellistest.Result(env, h)
	if err != nil || got != (receipt{Order: "o-1", Charge: "real-charge-card"}) {
		t.Fatalf("result %+v, %v", got, err)
	}
	if d := env.Now().Sub(start); d != 24*time.Hour {
		t.Errorf("the fake clock moved %s, want 24h", d)
	}
	t.Logf("a day-long workflow took %s of wall time", time.Since(began))
}

func TestResultSkipsToTheEventTimeout(t *testing.T) {
	t.Parallel()
	env := trellistest.New(t, trellistest.Options{Workflows: []trellis.Registrable{slowOrder}})
	h := trellistest.Start(env, slowOrder, order{ID: "o-2"})
	_, err := trellistest.Result(env, h)
	if !errors.Is(err, trellis.ErrEventTimeout) {
		t.Fatalf("err = %v, want ErrEventTimeout", err)
	}
	if d := env.Now().Sub(trellistest.DefaultStart); d != 25*time.Hour {
		t.Errorf("clock moved %s, want 25h", d)
	}
}

func TestOverrideStepAndHistory(t *testing.T) {
	t.Parallel()
	calls := 0
	env := trellistest.New(t, trellistest.Options{
		Workflows: []trellis.Registrable{slowOrder},
		Steps: map[string]any{"charge": func(ctx context.Context) (string, error) {
			calls++
			if calls < 3 {
				return "", errors.New("card network down")
			}
			return "mock-charge-" + trellis.StepInfo(ctx).IdempotencyKey, nil
		}},
	})
	h := trellistest.Start(env, slowOrder, order{ID: "o-3"})
	env.SendEvent(h.RunID(), "paid", "card")
	env.Advance(24 * time.Hour)
	env.Approve(h.RunID(), "manager")
	got, err := trellistest.Result(env, h) // skips the retry backoffs
	if err != nil || got.Charge != "mock-charge-"+h.RunID()+"/3" {
		t.Fatalf("result %+v, %v", got, err)
	}
	ops := env.History(h.RunID())
	var kinds []string
	for _, op := range ops {
		kinds = append(kinds, string(op.Kind)+":"+op.Name)
	}
	if strings.Join(kinds, " ") != "timer: event:paid approval:manager step:charge" {
		t.Fatalf("history %v", kinds)
	}
	if charge := ops[3]; charge.Attempts != 3 || len(charge.AttemptLog) != 2 || charge.AttemptLog[0].Error.Message != "card network down" {
		t.Errorf("charge op %+v", charge)
	}
}

// recorder is a testing.TB that records failures instead of failing.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, strings.TrimSpace(strings.ReplaceAll(format, "%v", "")+" "+errorsText(args)))
}

func errorsText(args []any) string {
	var b strings.Builder
	for _, a := range args {
		if e, ok := a.(error); ok {
			b.WriteString(e.Error())
		}
	}
	return b.String()
}

func TestOverrideOfTheWrongType(t *testing.T) {
	t.Parallel()
	rec := &recorder{TB: t}
	env := trellistest.New(rec, trellistest.Options{
		Workflows: []trellis.Registrable{slowOrder},
		Steps:     map[string]any{"charge": func(ctx context.Context) (int, error) { return 7, nil }},
	})
	h := trellistest.Start(env, slowOrder, order{ID: "o-4"})
	env.SendEvent(h.RunID(), "paid", "card")
	env.Advance(24 * time.Hour)
	env.Approve(h.RunID(), "manager")
	if _, err := trellistest.Result(env, h); err == nil {
		t.Fatal("the run succeeded with a mistyped override")
	}
	ops := env.History(h.RunID())
	charge := ops[len(ops)-1]
	want := `the override of step "charge" is a func(context.Context) (int, error), but the workflow calls the step with a func(context.Context) (string, error)`
	if charge.Name != "charge" || charge.Attempts != 1 || charge.Error == nil || !strings.Contains(charge.Error.Message, want) {
		t.Errorf("charge op %+v", charge)
	}
	if len(rec.errs) != 1 || !strings.Contains(rec.errs[0], want) {
		t.Errorf("test errors %q", rec.errs)
	}
}

// fatalRecorder is a testing.TB whose Fatalf records and stops the caller with a panic.
type fatalRecorder struct {
	testing.TB
	msg string
}

type fatalStop struct{}

func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	panic(fatalStop{})
}

// fatal returns the message of the Fatalf that fn ends with, or "".
func (r *fatalRecorder) fatal(fn func()) (msg string) {
	r.msg = ""
	defer func() {
		if v := recover(); v != nil {
			if _, ok := v.(fatalStop); !ok {
				panic(v)
			}
			msg = r.msg
		}
	}()
	fn()
	return ""
}

func TestOverrideOfTheWrongShapeFailsAtOnce(t *testing.T) {
	t.Parallel()
	rec := &fatalRecorder{TB: t}
	env := trellistest.New(rec, trellistest.Options{})
	for _, fn := range []any{func() error { return nil }, 42, func(ctx context.Context) string { return "" }} {
		msg := rec.fatal(func() { env.OverrideStep("charge", fn) })
		if !strings.Contains(msg, `override of step "charge"`) || !strings.Contains(msg, "is not a func(context.Context) (T, error)") {
			t.Errorf("%T: message %q", fn, msg)
		}
	}
}

func TestRejectedApproval(t *testing.T) {
	t.Parallel()
	rec := &fatalRecorder{TB: t}
	env := trellistest.New(rec, trellistest.Options{Workflows: []trellis.Registrable{slowOrder}})
	h := trellistest.Start(env, slowOrder, order{ID: "o-5"})
	env.SendEvent(h.RunID(), "paid", "card")
	env.Advance(24 * time.Hour)
	msg := rec.fatal(func() { env.Approve(h.RunID(), "someone-else") })
	if !strings.Contains(msg, `has no pending approval request "someone-else"`) {
		t.Errorf("message %q", msg)
	}
	env.Reject(h.RunID(), "manager")
	if _, err := trellistest.Result(env, h); err == nil || !strings.Contains(err.Error(), "rejected") {
		t.Fatalf("err = %v", err)
	}
	if r := env.Finish(h.RunID()); r.Status != trellis.StatusFailed {
		t.Errorf("status %s", r.Status)
	}
}
