// Package proto holds the .proto files of the worker protocol
// (trellis/worker/v1/worker.proto, docs/worker-protocol.md). The generated Go
// code is committed under internal/gen; regenerate it after a change with
// `go generate ./proto` (or `make proto`), which needs only Go.
package proto

//go:generate sh -c "cd .. && go tool buf lint && go tool buf generate"
