// Package proto holds the .proto files of the worker protocol
// (trellis/worker/v1/worker.proto, docs/worker-protocol.md). The generated Go
// code is committed under internal/gen; after a change to a .proto, regenerate
// it with `go generate ./proto` (`make proto` runs it): it lints the files and
// generates the code with buf and the protoc plugins, all `tool` dependencies
// of the tools module (tools/go.mod, kept apart so that the root module's
// go.mod names only what Trellis imports), so it needs only Go.
// TestGeneratedCodeIsCurrent fails until the committed code is what it
// generates.
package proto

// go generate runs in this directory; `go -C ..` runs buf from the module root,
// where buf.yaml and buf.gen.yaml are and where buf.gen.yaml's plugin commands
// (`go tool -modfile=tools/go.mod ...`) expect to run.
//go:generate go -C .. tool -modfile=tools/go.mod buf lint
//go:generate go -C .. tool -modfile=tools/go.mod buf generate --template buf.gen.yaml
