package sqlstore

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/trellis-dev/trellis/store"
)

func TestRebind(t *testing.T) {
	t.Parallel()
	d := &Dialect{Param: func(n int) string { return "?" + strconv.Itoa(n) }}
	cases := map[string]string{
		`SELECT $1, $12 FROM t WHERE a = $2`: `SELECT ?1, ?12 FROM t WHERE a = ?2`,
		`SELECT '$1', $1`:                    `SELECT '$1', ?1`,
		`SELECT $ FROM t`:                    `SELECT $ FROM t`,
	}
	for in, want := range cases {
		if got := d.rebind(in); got != want {
			t.Errorf("rebind(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestTimeScan(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 1, 2, 3, 4, 5, 6000, time.FixedZone("x", 3600))
	for _, v := range []any{at.UnixNano(), at} {
		var tm Time
		if err := tm.Scan(v); err != nil {
			t.Fatal(err)
		}
		if !tm.Valid || !tm.T.Equal(at) || tm.T.Location() != time.UTC {
			t.Errorf("Scan(%T) = %v, want %v in UTC", v, tm, at)
		}
	}
	var tm Time
	if err := tm.Scan(nil); err != nil || tm.Valid || tm.Ptr() != nil {
		t.Errorf("Scan(nil) = %v, %v", tm, err)
	}
	if err := tm.Scan("x"); err == nil {
		t.Error("Scan(string) succeeded")
	}
}

func TestRunListQuery(t *testing.T) {
	t.Parallel()
	s := New(Dialect{
		Param:    func(n int) string { return "?" + strconv.Itoa(n) },
		Time:     func(t time.Time) any { return t.UnixNano() },
		InList:   func(expr, param string) string { return expr + " IN (SELECT value FROM json_each(" + param + "))" },
		List:     func(list []string) (any, error) { return strings.Join(list, ","), nil },
		Lock:     func(...string) string { return "" },
		TextList: func(col string) string { return col },
	})
	q, args, limit, err := s.RunListQuery(&store.RunListParams{Namespace: "ns", Limit: 10,
		Statuses: []store.Status{store.StatusPending, store.StatusRunning}, Workflow: "wf", Cursor: "42"})
	if err != nil {
		t.Fatal(err)
	}
	want := `SELECT ` + RunCols + ` FROM runs WHERE namespace = ?1 AND status IN (SELECT value FROM json_each(?2))` +
		` AND workflow = ?3 AND sequence < ?4 ORDER BY sequence DESC LIMIT ?5`
	if q != want || limit != 10 {
		t.Errorf("query = %q, limit %d\nwant    %q, limit 10", q, limit, want)
	}
	if len(args) != 5 || args[0] != "ns" || args[1] != "pending,running" || args[2] != "wf" ||
		args[3] != int64(42) || args[4] != 11 {
		t.Errorf("args = %v", args)
	}
	for _, p := range []*store.RunListParams{
		{Namespace: "ns", Statuses: []store.Status{"nope"}},
		{Namespace: "ns", Cursor: "not a cursor"},
		{Namespace: "ns", Limit: -1},
	} {
		if _, _, _, err := s.RunListQuery(p); !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("RunListQuery(%+v) = %v, want ErrInvalidParams", p, err)
		}
	}
}
