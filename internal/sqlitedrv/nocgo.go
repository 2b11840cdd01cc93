//go:build trellis_cgo && !cgo

package sqlitedrv

// The tag trellis_cgo links SQLite's C library, which needs cgo: build with
// CGO_ENABLED=1 and a C compiler (gcc or clang) on the PATH.
var _ int = "trellis_cgo needs cgo: set CGO_ENABLED=1 and install a C compiler"
