// Package migrations holds the Postgres store's schema migrations, as SQL files
// applied in the order of their version prefix: for the store, and for the test
// helper that empties a schema for reuse and writes again the rows they write.
package migrations

import "embed"

// FS holds the migrations, NNNN_name.sql, at its root.
//
//go:embed *.sql
var FS embed.FS
