package trellistest

import (
	"context"
	"fmt"
	"reflect"

	"github.com/trellis-dev/trellis"
)

var (
	ctxType   = reflect.TypeFor[context.Context]()
	errorType = reflect.TypeFor[error]()
)

// OverrideStep replaces the function of every step named name, in every run of
// the environment, from the next attempt on: fn runs instead of the function the
// workflow passes to trellis.Step or trellis.Async (the way Temporal's test
// suite mocks activities). fn must be a func(context.Context) (T, error) with
// the step's T; a function of another shape fails the test now, and one whose T
// differs from the step's fails the test when the step runs (and the step fails,
// not retried). A nil fn removes the override.
func (e *Env) OverrideStep(name string, fn any) {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if fn == nil {
		delete(e.steps, name)
		return
	}
	if err := checkStepFunc(reflect.TypeOf(fn)); err != nil {
		e.fatalf("override of step %q: %v", name, err)
	}
	e.steps[name] = fn
}

func checkStepFunc(t reflect.Type) error {
	if t.Kind() != reflect.Func || t.IsVariadic() || t.NumIn() != 1 || t.In(0) != ctxType ||
		t.NumOut() != 2 || t.Out(1) != errorType {
		return fmt.Errorf("%s is not a func(context.Context) (T, error)", t)
	}
	return nil
}

// stepOverride is the client's trellis.Config.StepOverride.
func (e *Env) stepOverride(name string, want reflect.Type) (any, bool) {
	e.mu.Lock()
	fn, ok := e.steps[name]
	e.mu.Unlock()
	if !ok {
		return nil, false
	}
	if got := reflect.TypeOf(fn); got != want {
		err := fmt.Errorf("trellistest: the override of step %q is a %s, but the workflow calls the step with a %s", name, got, want)
		e.t.Errorf("%v", err)
		return failingFunc(want, trellis.NonRetryable(err)), true
	}
	return fn, true
}

// failingFunc returns a function of type t (a step function) that returns err.
func failingFunc(t reflect.Type, err error) any {
	out := []reflect.Value{reflect.Zero(t.Out(0)), reflect.ValueOf(&err).Elem()}
	return reflect.MakeFunc(t, func([]reflect.Value) []reflect.Value { return out }).Interface()
}

// stepStopper returns a step function of type t that calls stop and returns its error.
func stepStopper(t reflect.Type, stop func(ctx context.Context) error) any {
	zero := reflect.Zero(t.Out(0))
	return reflect.MakeFunc(t, func(args []reflect.Value) []reflect.Value {
		err := stop(args[0].Interface().(context.Context))
		return []reflect.Value{zero, reflect.ValueOf(&err).Elem()}
	}).Interface()
}
