package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// runVersion prints the module version the binary was built from (a release tag
// for `go install …@vX`, "(devel)" for a build in a checkout), its commit when
// known, and the Go version.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "version", "Print the version of trellis and of the Go toolchain that built it.", stderr)
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) > 0:
		return usagef(fs, "version: unexpected argument %q", pos[0])
	}
	fmt.Fprintln(stdout, versionLine())
	return nil
}

// versionLine is e.g. "trellis v0.3.0 go1.26.0 linux/amd64" or
// "trellis (devel) commit 1a2b3c4d5e6f (modified) go1.26.0 linux/amd64".
func versionLine() string {
	version, commit := "(unknown)", ""
	if info, ok := debug.ReadBuildInfo(); ok {
		if info.Main.Version != "" {
			version = info.Main.Version
		}
		commit = buildCommit(info)
	}
	s := "trellis " + version
	if commit != "" {
		s += " commit " + commit
	}
	return fmt.Sprintf("%s %s %s/%s", s, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// buildCommit returns the VCS revision the binary was built from (shortened),
// marked when the tree had changes; "" when the build did not record it.
func buildCommit(info *debug.BuildInfo) string {
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value
		}
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if rev != "" && modified == "true" {
		rev += " (modified)"
	}
	return rev
}
