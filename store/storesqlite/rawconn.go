package storesqlite

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"reflect"
)

// The writer talks to its connection through the driver's own interfaces, not
// database/sql: every write of the store goes through this one goroutine, and
// database/sql's per-statement locking, conversion and bookkeeping cost about a
// fifth of its time. The connection is held with sql.Conn.Raw for each batch.

// rawConn is the write connection's driver connection with its prepared statements.
type rawConn struct {
	dc    driver.Conn
	stmts map[string]driver.Stmt
	// nv is the arguments of the statement being run, reused from one statement
	// to the next: the driver copies them when it binds them.
	nv []driver.NamedValue
}

func (c *rawConn) stmt(query string) (driver.Stmt, error) {
	if st, ok := c.stmts[query]; ok {
		return st, nil
	}
	pc, ok := c.dc.(driver.ConnPrepareContext)
	if !ok {
		return nil, errors.New("sqlite driver cannot prepare with a context")
	}
	st, err := pc.PrepareContext(context.Background(), query)
	if err != nil {
		return nil, err
	}
	c.stmts[query] = st
	return st, nil
}

func (c *rawConn) exec(query string, args []any) (driver.Result, error) {
	st, err := c.stmt(query)
	if err != nil {
		return nil, err
	}
	nv, err := c.namedValues(args)
	if err != nil {
		return nil, err
	}
	defer clear(nv)
	return st.(driver.StmtExecContext).ExecContext(context.Background(), nv)
}

// execScript runs SQL that may hold several statements, unprepared.
func (c *rawConn) execScript(query string) (driver.Result, error) {
	ex, ok := c.dc.(driver.ExecerContext)
	if !ok {
		return nil, errors.New("sqlite driver cannot execute a script")
	}
	return ex.ExecContext(context.Background(), query, nil)
}

func (c *rawConn) query(query string, args []any) (*rawRows, error) {
	st, err := c.stmt(query)
	if err != nil {
		return nil, err
	}
	nv, err := c.namedValues(args)
	if err != nil {
		return nil, err
	}
	defer clear(nv)
	rows, err := st.(driver.StmtQueryContext).QueryContext(context.Background(), nv)
	if err != nil {
		return nil, err
	}
	return &rawRows{rows: rows}, nil
}

func (c *rawConn) close() error {
	var errs []error
	for _, st := range c.stmts {
		errs = append(errs, st.Close())
	}
	clear(c.stmts)
	return errors.Join(errs...)
}

// namedValues converts arguments as database/sql does for drivers without their
// own converter, into c.nv. The caller clears what it used once the driver
// has bound it (clearing all of c.nv, which a batch insert grows to thousands,
// before every statement cost a tenth of the writer's time in w5).
func (c *rawConn) namedValues(args []any) ([]driver.NamedValue, error) {
	if cap(c.nv) < len(args) {
		c.nv = make([]driver.NamedValue, len(args))
	}
	nv := c.nv[:len(args)]
	for i, a := range args {
		v, err := driver.DefaultParameterConverter.ConvertValue(a)
		if err != nil {
			return nil, fmt.Errorf("argument %d: %w", i+1, err)
		}
		nv[i] = driver.NamedValue{Ordinal: i + 1, Value: v}
	}
	return nv, nil
}

// rawRows iterates a driver result like *sql.Rows.
type rawRows struct {
	rows   driver.Rows
	vals   []driver.Value
	err    error
	closed bool
}

func (r *rawRows) Next() bool {
	if r.closed {
		return false
	}
	if r.vals == nil {
		r.vals = make([]driver.Value, len(r.rows.Columns()))
	}
	if err := r.rows.Next(r.vals); err != nil {
		if !errors.Is(err, io.EOF) {
			r.err = err
		}
		_ = r.Close()
		return false
	}
	return true
}

func (r *rawRows) Scan(dest ...any) error {
	if r.closed || r.vals == nil {
		return errors.New("sql: Scan called without calling Next")
	}
	if len(dest) != len(r.vals) {
		return fmt.Errorf("sql: expected %d destination arguments in Scan, not %d", len(r.vals), len(dest))
	}
	for i, d := range dest {
		if err := assign(d, r.vals[i]); err != nil {
			return fmt.Errorf("sql: Scan error on column index %d: %w", i, err)
		}
	}
	return nil
}

func (r *rawRows) Err() error { return r.err }

func (r *rawRows) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	return r.rows.Close()
}

// rawRow is the first row of a query, like *sql.Row.
type rawRow struct {
	rows *rawRows
	err  error
}

// wrap makes r the first row of a query's result.
func (r *rawRow) wrap(rows *rawRows, err error) *rawRow {
	r.rows, r.err = rows, err
	return r
}

func (r *rawRow) Scan(dest ...any) error {
	if r.err != nil {
		return r.err
	}
	defer r.rows.Close()
	if !r.rows.Next() {
		if err := r.rows.Err(); err != nil {
			return err
		}
		return sql.ErrNoRows
	}
	if err := r.rows.Scan(dest...); err != nil {
		return err
	}
	return r.rows.Close()
}

// assign stores a driver value in dest, for the destination types this package
// scans into.
func assign(dest any, v driver.Value) error {
	switch d := dest.(type) {
	case *string:
		switch x := v.(type) {
		case string:
			*d = x
			return nil
		case []byte:
			*d = string(x)
			return nil
		}
	case *[]byte:
		switch x := v.(type) {
		case nil:
			*d = nil
			return nil
		case []byte:
			*d = bytes.Clone(x)
			return nil
		case string:
			*d = []byte(x)
			return nil
		}
	case *int64:
		if x, ok := v.(int64); ok {
			*d = x
			return nil
		}
	case *int:
		if x, ok := v.(int64); ok {
			*d = int(x)
			return nil
		}
	case *float64:
		switch x := v.(type) {
		case float64:
			*d = x
			return nil
		case int64:
			*d = float64(x)
			return nil
		}
	case *bool:
		switch x := v.(type) {
		case int64:
			*d = x != 0
			return nil
		case bool:
			*d = x
			return nil
		}
	case sql.Scanner:
		return d.Scan(v)
	case *any:
		*d = v
		return nil
	default:
		// Named string and integer types (store.Status, store.OpKind, ...).
		rv := reflect.ValueOf(dest)
		if rv.Kind() == reflect.Pointer && !rv.IsNil() {
			e := rv.Elem()
			switch x := v.(type) {
			case string:
				if e.Kind() == reflect.String {
					e.SetString(x)
					return nil
				}
			case int64:
				switch e.Kind() {
				case reflect.Int, reflect.Int64, reflect.Int32:
					e.SetInt(x)
					return nil
				}
			}
		}
	}
	return fmt.Errorf("converting %T to %T is unsupported", v, dest)
}
