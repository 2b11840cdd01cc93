// Package trellis holds the declarations of the Trellis API that the
// determinism analyzer looks for, with their real signatures: the analyzer
// reads only types, and loading the real package from source (with its
// drivers) would cost each test run a minute. cmd/trellis-vet's test runs the
// analyzer on the real package through go vet.
package trellis

import (
	"context"
	"time"
)

type Context struct{}

func (wc *Context) Now() time.Time              { return time.Time{} }
func (wc *Context) Sleep(d time.Duration) error { return nil }
func (wc *Context) Random() uint64              { return 0 }

type StepOptions struct{}

type Future[T any] struct{}

type Workflow[In, Out any] struct{}

func NewWorkflow[In, Out any](name string, fn func(*Context, In) (Out, error), opts ...struct{}) *Workflow[In, Out] {
	return nil
}

func Step[T any](wc *Context, name string, fn func(ctx context.Context) (T, error), opts ...StepOptions) (T, error) {
	var zero T
	return zero, nil
}

func Async[T any](wc *Context, name string, fn func(ctx context.Context) (T, error), opts ...StepOptions) *Future[T] {
	return nil
}

func TxStep[T any](wc *Context, name string, fn func(ctx context.Context, tx any) (T, error), opts ...StepOptions) (T, error) {
	var zero T
	return zero, nil
}
