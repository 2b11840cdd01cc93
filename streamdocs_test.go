package trellis_test

import (
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis/store"
)

// Every list of the lifecycle events, in the docs, the package docs and the
// CLI's help, names every event of store.StreamLifecycle, in its order, and no
// other: a list that left run.resumed or run.blocked out told users of events
// the engine never writes as if they were all.
func TestStreamLifecycleListsAgree(t *testing.T) {
	want := fmt.Sprint(store.StreamLifecycle())
	name := regexp.MustCompile(`(?:run|step)\.[a-z]+`)
	// Each list: a file and the text that begins and ends it there.
	for _, l := range []struct{ file, from, to string }{
		{"emit.go", "// Emit publishes", "func Emit("},
		{"stream.go", "// StreamEvent is one event", "type StreamEvent struct"},
		{"cmd/trellis/runs_watch.go", "about := ", "return withRun"},
		{"docs/concepts.md", "A workflow publishes events for its clients", "```sh"},
		{"docs/streams.md", "## Lifecycle events", "`error` is"},
	} {
		b, err := os.ReadFile(l.file)
		if err != nil {
			t.Fatal(err)
		}
		_, text, ok := strings.Cut(string(b), l.from)
		text, _, ok2 := strings.Cut(text, l.to)
		if !ok || !ok2 {
			t.Errorf("%s: no list between %q and %q", l.file, l.from, l.to)
			continue
		}
		if got := fmt.Sprint(name.FindAllString(text, -1)); got != want {
			t.Errorf("%s lists the lifecycle events %s, want %s", l.file, got, want)
		}
	}
}
