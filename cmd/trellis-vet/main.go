// Command trellis-vet reports nondeterministic code in Trellis workflow
// functions (analysis/determinism): the wall clock, random numbers, goroutines,
// select statements, map ranges and the environment, each with the durable
// alternative. Run it through go vet:
//
//	go install github.com/trellis-dev/trellis/cmd/trellis-vet@latest
//	go vet -vettool=$(which trellis-vet) ./...
//
// or on its own: trellis-vet ./... . It exits non-zero when it reports
// anything. See docs/determinism.md.
package main

import (
	"github.com/trellis-dev/trellis/analysis/determinism"
	"golang.org/x/tools/go/analysis/singlechecker"
)

func main() { singlechecker.Main(determinism.Analyzer) }
