package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/trellis-dev/trellis"
	"github.com/trellis-dev/trellis/internal/gen/trellis/worker/v1/workerv1connect"
)

// runVersion prints the module version the binary was built from (a release tag
// for `go install …@vX`, "(devel)" for a build in a checkout), its commit when
// known, and the Go version; with --json, those and the protocols it speaks.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("version", "version [--json]", "Print the version of trellis and of the Go toolchain that built it.", stderr)
	asJSON := fs.Bool("json", false, "print the version, the build's VCS information and the protocols as JSON")
	pos, err := parseArgs(fs, args)
	switch {
	case err != nil:
		return err
	case len(pos) > 0:
		return usagef(fs, "version: unexpected argument %q", pos[0])
	}
	if *asJSON {
		return writeJSON(stdout, buildVersion())
	}
	fmt.Fprintln(stdout, versionLine())
	return nil
}

// versionInfo is what trellis version --json prints.
type versionInfo struct {
	Version    string `json:"version"`               // the module's version, "(devel)" in a checkout
	Go         string `json:"go"`                    // the toolchain that built it
	OS         string `json:"os"`                    // GOOS
	Arch       string `json:"arch"`                  // GOARCH
	Commit     string `json:"commit,omitempty"`      // vcs.revision, whole
	CommitTime string `json:"commit_time,omitempty"` // vcs.time
	Modified   bool   `json:"modified"`              // vcs.modified: the tree had changes
	// Protocols are the versions of what trellis speaks and writes.
	Protocols versionProtocols `json:"protocols"`
}

type versionProtocols struct {
	HTTPAPI string `json:"http_api"` // the HTTP API's path prefix (docs/http-api.md)
	Worker  string `json:"worker"`   // the worker protocol's package (docs/worker-protocol.md)
	History string `json:"history"`  // runs history --json (docs/history-format.md)
}

func buildVersion() versionInfo {
	v := versionInfo{Version: "(unknown)", Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH,
		Protocols: versionProtocols{HTTPAPI: "v1",
			Worker:  strings.TrimSuffix(workerv1connect.WorkerServiceName, ".WorkerService"),
			History: trellis.HistoryFormat}}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if info.Main.Version != "" {
		v.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.CommitTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
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
