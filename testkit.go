package trellis

import (
	"github.com/trellis-dev/trellis/internal/engine"
	"github.com/trellis-dev/trellis/internal/testkit"
)

// The test kit (package trellistest) runs workflows on an engine of its own to
// replay exported histories; these give it what it needs of this package.
func init() {
	testkit.Definition = func(wf any) (*engine.Definition, bool) {
		r, ok := wf.(Registrable)
		if !ok {
			return nil, false
		}
		return &r.definition().eng, true
	}
	testkit.ErrorType = errorType
}
