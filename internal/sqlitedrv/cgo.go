//go:build trellis_cgo && cgo

package sqlitedrv

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"strings"

	sqlite3 "github.com/mattn/go-sqlite3"
)

// Library names the SQLite library of this build.
const Library = "github.com/mattn/go-sqlite3"

// Open opens the database of dsn (see the package documentation) through a
// connector of its own: nothing is registered with database/sql under a name
// (the mattn package registers "sqlite3" itself).
func Open(dsn string) (*sql.DB, error) {
	path, query, _ := strings.Cut(dsn, "?")
	vals, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("sqlite connection string %q: %w", dsn, err)
	}
	c := &connector{path: path}
	for k, vs := range vals {
		if k != "_pragma" {
			return nil, fmt.Errorf("sqlite connection string %q: unknown parameter %q", dsn, k)
		}
		for _, v := range vs {
			c.pragmas = append(c.pragmas, "PRAGMA "+v)
		}
	}
	return sql.OpenDB(c), nil
}

// connector opens connections to one file and runs the pragmas on each.
type connector struct {
	path    string
	pragmas []string
}

func (c *connector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Driver().Open(c.path)
	if err != nil {
		return nil, err
	}
	conn := dc.(*sqlite3.SQLiteConn)
	for _, p := range c.pragmas {
		if _, err := conn.ExecContext(ctx, p, nil); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("%s: %w", p, err)
		}
	}
	return conn, nil
}

func (c *connector) Driver() driver.Driver { return &sqlite3.SQLiteDriver{} }

// code is the extended result code of a SQLite error, or -1.
func code(err error) int {
	var se sqlite3.Error
	if !errors.As(err, &se) {
		return -1
	}
	return int(se.ExtendedCode)
}

var (
	codeConstraintUnique     = int(sqlite3.ErrConstraintUnique)
	codeConstraintPrimaryKey = int(sqlite3.ErrConstraintPrimaryKey)
	codeFull                 = int(sqlite3.ErrFull)
	codeIOErr                = int(sqlite3.ErrIoErr)
)
