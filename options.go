package trellis

import (
	"errors"
	"fmt"
	"reflect"
)

// ErrInvalidOptions: a function that takes its options as a variadic argument
// (opts ...StartOptions and the like) was given more than one options value.
// The signatures are variadic so that the options can be left out; a second
// value is refused rather than silently dropped. Functions that return an
// error return it wrapped (naming the call); NewWorkflow and NewJob, which
// return none, panic with it when the workflow is defined.
var ErrInvalidOptions = errors.New("more than one options value")

// oneOption returns the options value of opts: the zero value when there is
// none, the one when there is one, and an ErrInvalidOptions error naming call
// when there are more.
func oneOption[O any](call string, opts []O) (O, error) {
	var o O
	switch len(opts) {
	case 0:
		return o, nil
	case 1:
		return opts[0], nil
	}
	return o, &optionsError{call: call, n: len(opts), typ: reflect.TypeFor[O]().Name()}
}

// optionsError is oneOption's error: "trellis.Start: 2 StartOptions given;
// pass at most one", which is ErrInvalidOptions.
type optionsError struct {
	call string
	n    int
	typ  string
}

func (e *optionsError) Error() string {
	return fmt.Sprintf("%s: %d %s given; pass at most one", e.call, e.n, e.typ)
}

func (e *optionsError) Unwrap() error { return ErrInvalidOptions }

// mustOneOption is oneOption for the constructors that return no error: it
// panics, as regexp.MustCompile does, at the definition of the workflow.
func mustOneOption[O any](call string, opts []O) O {
	o, err := oneOption(call, opts)
	if err != nil {
		panic(err)
	}
	return o
}
