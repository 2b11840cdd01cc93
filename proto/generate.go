// Package proto holds the .proto files of the worker protocol
// (trellis/worker/v1/worker.proto, docs/worker-protocol.md). The generated Go
// code is committed under internal/gen; after a change to a .proto, regenerate
// it with `go generate ./proto` (`make proto` runs it): it lints the files and
// generates the code with buf and the protoc plugins, all `go tool`
// dependencies of go.mod, so it needs only Go. TestGeneratedCodeIsCurrent fails
// until the committed code is what it generates.
package proto

// go generate runs in this directory; buf.yaml and buf.gen.yaml are at the
// module root (..), and --output puts buf.gen.yaml's `out` under it.
//go:generate go tool buf lint ..
//go:generate go tool buf generate .. --template ../buf.gen.yaml --output ..
