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
