// Package sqlitedrv opens SQLite databases with the SQLite library this build
// links: modernc.org/sqlite (pure Go, the default) or, in a build with the tag
// trellis_cgo, github.com/mattn/go-sqlite3 (SQLite's C source through cgo).
//
// The C library runs the store's statements in about half the CPU time of the
// Go translation, so the writer of a busy SQLite store moves more work; the
// price is a C compiler at build time and a first build that compiles SQLite
// (about a minute). Every part of Trellis that opens a SQLite file goes through
// this package so that one process links one SQLite library: two copies in one
// process that open the same file can corrupt it (each keeps its own view of
// the file's POSIX locks, and closing a file in one drops the other's locks).
//
// Connection strings take the form PATH?_pragma=NAME(VALUE)&_pragma=…, the
// modernc driver's own; with the cgo driver each pragma is run on every new
// connection before it is used.
package sqlitedrv
