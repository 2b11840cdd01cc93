//go:build !trellis_cgo

package sqlitedrv

import (
	"database/sql"
	"errors"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Library names the SQLite library of this build.
const Library = "modernc.org/sqlite"

// Open opens the database of dsn (see the package documentation) with the
// database/sql driver that modernc.org/sqlite registers as "sqlite".
func Open(dsn string) (*sql.DB, error) { return sql.Open("sqlite", dsn) }

// code is the extended result code of a SQLite error, or -1.
func code(err error) int {
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return -1
	}
	return se.Code()
}

const (
	codeConstraintUnique     = sqlite3.SQLITE_CONSTRAINT_UNIQUE
	codeConstraintPrimaryKey = sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY
	codeFull                 = sqlite3.SQLITE_FULL
	codeIOErr                = sqlite3.SQLITE_IOERR
)
