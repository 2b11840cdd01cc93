package trellis_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"testing"

	"github.com/trellis-dev/trellis"
)

// A failed step records a Go type only when it says something: a named error
// type, found through %w wrapping; never the anonymous carriers of errors.New
// and fmt.Errorf (*errors.errorString, *fmt.wrapError).
func TestStepErrorType(t *testing.T) {
	t.Parallel()
	cases := []struct {
		err  error
		want string
	}{
		{errors.New("plain"), ""},
		{fmt.Errorf("wrapped: %w", errors.New("plain")), ""},
		{trellis.NonRetryable(fmt.Errorf("joined: %w", errors.Join(errors.New("a"), errors.New("b")))), ""},
		{fmt.Errorf("reading: %w", &fs.PathError{Op: "open", Path: "x", Err: fs.ErrNotExist}), "*fs.PathError"},
		{trellis.NonRetryable(&fs.PathError{Op: "open", Path: "x", Err: fs.ErrNotExist}), "*fs.PathError"},
	}
	wf := trellis.NewWorkflow("typed-errors", func(wc *trellis.Context, i int) (string, error) {
		_, err := trellis.Step(wc, "fails", func(context.Context) (int, error) { return 0, cases[i].err },
			trellis.StepOptions{Retry: trellis.RetryPolicy{MaxAttempts: 1}})
		var se *trellis.StepError
		if !errors.As(err, &se) {
			return "", fmt.Errorf("not a StepError: %v", err)
		}
		return se.Type, nil
	})
	c := setup(t, wf)
	for i, tc := range cases {
		h := must[*trellis.Handle[string]](t)(trellis.Start(ctxT(t), c, wf, i))
		if got := mustResult(t, h); got != tc.want {
			t.Errorf("%v: recorded type %q, want %q", tc.err, got, tc.want)
		}
	}
}

// A step that ended before its first attempt (its run cancelled between two
// steps, say) did not run; it read "failed after 0 attempt(s)".
func TestStepErrorMessage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		e    trellis.StepError
		want string
	}{
		{trellis.StepError{Step: "b", Attempts: 0, Message: "run cancelled", Type: "cancelled"}, `step "b" did not run: run cancelled`},
		{trellis.StepError{Step: "b", Attempts: 2, Message: "boom"}, `step "b" failed after 2 attempt(s): boom`},
	} {
		if got := c.e.Error(); got != c.want {
			t.Errorf("%+v: %q, want %q", c.e, got, c.want)
		}
	}
	if !errors.Is(&trellis.StepError{Step: "b", Message: "run cancelled", Type: "cancelled"}, trellis.ErrCancelled) {
		t.Error("a step cancelled before it ran is not ErrCancelled")
	}
}
