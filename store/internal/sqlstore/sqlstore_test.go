package sqlstore

import (
	"strconv"
	"testing"
	"time"
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
