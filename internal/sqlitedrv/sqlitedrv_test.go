package sqlitedrv_test

import (
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/trellis-dev/trellis/internal/sqlitedrv"
)

// TestOpenRunsPragmasOnEveryConnection opens a file with pragmas and reads them
// back on two connections held at once: each connection ran them.
func TestOpenRunsPragmasOnEveryConnection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.db")
	db, err := sqlitedrv.Open(path + "?_pragma=busy_timeout(4321)&_pragma=journal_mode(WAL)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := t.Context()
	var conns []*sql.Conn
	for range 2 {
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		conns = append(conns, c)
	}
	for i, c := range conns {
		var timeout int
		var mode string
		if err := c.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&timeout); err != nil || timeout != 4321 {
			t.Errorf("connection %d: busy_timeout %d, %v; want 4321", i, timeout, err)
		}
		if err := c.QueryRowContext(ctx, "PRAGMA journal_mode").Scan(&mode); err != nil || mode != "wal" {
			t.Errorf("connection %d: journal_mode %q, %v; want wal", i, mode, err)
		}
	}
}

// TestErrorsAreClassified checks IsUniqueViolation on real constraint failures
// and that other errors are neither unique violations nor disk errors.
func TestErrorsAreClassified(t *testing.T) {
	db, err := sqlitedrv.Open(filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{
		"CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT UNIQUE, n INTEGER CHECK (n > 0))",
		"INSERT INTO t VALUES (1, 'a', 1)",
	} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
	_, unique := db.Exec("INSERT INTO t VALUES (2, 'a', 1)")
	_, primary := db.Exec("INSERT INTO t VALUES (1, 'b', 1)")
	_, check := db.Exec("INSERT INTO t VALUES (3, 'c', 0)")
	_, syntax := db.Exec("INSERT INTO")
	for name, c := range map[string]struct {
		err          error
		unique, disk bool
	}{
		"unique": {unique, true, false}, "primary key": {primary, true, false},
		"check": {check, false, false}, "syntax": {syntax, false, false},
		"not sqlite": {errors.New("other"), false, false}, "nil": {nil, false, false},
	} {
		if name != "not sqlite" && name != "nil" && c.err == nil {
			t.Errorf("%s: no error", name)
			continue
		}
		if got := sqlitedrv.IsUniqueViolation(c.err); got != c.unique {
			t.Errorf("%s (%v): IsUniqueViolation %v, want %v", name, c.err, got, c.unique)
		}
		if got := sqlitedrv.IsDiskError(c.err); got != c.disk {
			t.Errorf("%s (%v): IsDiskError %v, want %v", name, c.err, got, c.disk)
		}
	}
	if !strings.Contains(sqlitedrv.Library, "sqlite") {
		t.Errorf("Library %q", sqlitedrv.Library)
	}
}
