// Package testkit gives package trellistest what the root package trellis keeps
// unexported: the engine's form of a workflow and the recorded type of errors.
// The root package fills these variables when it is initialised.
package testkit

import "github.com/trellis-dev/trellis/internal/engine"

var (
	// Definition returns the engine's form of a *trellis.Workflow (a
	// trellis.Registrable), and false for any other value.
	Definition func(wf any) (*engine.Definition, bool)
	// ErrorType is the root package's engine.Config.ErrorType.
	ErrorType func(err error) (string, bool)
)
