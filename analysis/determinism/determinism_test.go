package determinism_test

import (
	"testing"

	"github.com/trellis-dev/trellis/analysis/determinism"
	"golang.org/x/tools/go/analysis/analysistest"
)

// Every construct the analyzer knows, in a workflow (reported, with its
// alternative), in steps and plain functions (not reported), and silenced by
// the directive; testdata/src/example has one `want` per report.
func TestAnalyzer(t *testing.T) {
	analysistest.Run(t, analysistest.TestData(), determinism.Analyzer, "example")
}
