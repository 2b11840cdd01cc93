// Command gen writes store/storejs/methods_gen.go: the JetStream store's
// methods, by reflection over the store interfaces it implements (lists.go).
// Each method is a read of the local replica, a write that runs on the leader
// (forwarded by a follower), or written by hand; the leader's dispatch of
// forwarded writes, serveForwarded, is generated with them. A method the lists
// do not classify, a method that takes a func or returns a channel and is not
// written by hand, or an interface the SQLite replica does not implement fails
// the generation.
//
// Run it from store/storejs: go generate (gen.go), or go run ./internal/gen
// [-o file].
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	out := flag.String("o", "methods_gen.go", "the file to write")
	flag.Parse()
	if err := run(*out); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

// run generates the methods into path.
func run(path string) error {
	ms, err := methodSet()
	if err != nil {
		return err
	}
	src, err := emit(ms)
	if err != nil {
		return err
	}
	return os.WriteFile(path, src, 0o644)
}
