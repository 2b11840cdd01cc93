package schedule

import (
	"errors"
	"testing"
	"time"
)

func mustParse(t *testing.T, expr, zone string) *Spec {
	t.Helper()
	s, err := Parse(expr, zone)
	if err != nil {
		t.Fatalf("Parse(%q, %q): %v", expr, zone, err)
	}
	return s
}

// fires lists the fire times in (from, to].
func fires(s *Spec, from, to time.Time) []time.Time {
	var out []time.Time
	for t := s.Next(from); !t.IsZero() && !t.After(to); t = s.Next(t) {
		out = append(out, t)
	}
	return out
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestParseRejects(t *testing.T) {
	for _, c := range []struct{ expr, zone string }{
		{"", "UTC"},
		{"* * *", "UTC"},
		{"61 * * * *", "UTC"},
		{"0 0 30 2 *", "UTC"}, // never fires
		{"not cron", "UTC"},
		{"TZ=Europe/Berlin 0 2 * * *", "UTC"},
		{"@every 10ms", "UTC"},
		{"0 2 * * *", "Europe/Nowhere"},
		{"0 2 * * *", "Local"},
		{"0 2 * * *", "+02:00"},
	} {
		if _, err := Parse(c.expr, c.zone); !errors.Is(err, ErrInvalidSpec) {
			t.Errorf("Parse(%q, %q) = %v, want ErrInvalidSpec", c.expr, c.zone, err)
		}
	}
}

func TestNextPlain(t *testing.T) {
	s := mustParse(t, "0 2 * * *", "Europe/Berlin")
	got := fires(s, utc("2026-01-10T00:00:00Z"), utc("2026-01-12T00:00:00Z"))
	want := []time.Time{utc("2026-01-10T01:00:00Z"), utc("2026-01-11T01:00:00Z")} // 02:00 CET
	if !equalTimes(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	sec := mustParse(t, "*/20 * * * * *", "UTC")
	if got := fires(sec, utc("2026-01-10T00:00:00Z"), utc("2026-01-10T00:01:00Z")); len(got) != 3 {
		t.Fatalf("seconds field: %v", got)
	}
	every := mustParse(t, "@every 1s", "Europe/Berlin")
	if got := every.Next(utc("2026-01-10T00:00:00Z").Add(300 * time.Millisecond)); !got.Equal(utc("2026-01-10T00:00:01Z")) {
		t.Fatalf("@every 1s: %v", got)
	}
}

// Spring forward in Europe/Berlin: 2026-03-29, 02:00 CET becomes 03:00 CEST
// (01:00 UTC). The skipped 02:30 fires once, at 03:00 CEST.
func TestNextSpringForward(t *testing.T) {
	s := mustParse(t, "30 2 * * *", "Europe/Berlin")
	got := fires(s, utc("2026-03-27T12:00:00Z"), utc("2026-03-31T00:00:00Z"))
	want := []time.Time{
		utc("2026-03-28T01:30:00Z"), // 02:30 CET
		utc("2026-03-29T01:00:00Z"), // skipped 02:30: at 03:00 CEST
		utc("2026-03-30T00:30:00Z"), // 02:30 CEST
	}
	if !equalTimes(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// Every 15 minutes: 02:00..02:45 are skipped and fire once, at 03:00, which
	// is also a tick of its own: one fire at 01:00 UTC.
	q := mustParse(t, "*/15 * * * *", "Europe/Berlin")
	got = fires(q, utc("2026-03-29T00:30:00Z"), utc("2026-03-29T01:30:00Z"))
	want = []time.Time{utc("2026-03-29T00:45:00Z"), utc("2026-03-29T01:00:00Z"),
		utc("2026-03-29T01:15:00Z"), utc("2026-03-29T01:30:00Z")}
	if !equalTimes(got, want) {
		t.Fatalf("every 15 minutes: got %v, want %v", got, want)
	}
}

// Fall back in Europe/Berlin: 2026-10-25, 03:00 CEST becomes 02:00 CET (01:00
// UTC); 02:00-03:00 happens twice. 02:30 fires once, at its first occurrence.
func TestNextFallBack(t *testing.T) {
	s := mustParse(t, "30 2 * * *", "Europe/Berlin")
	got := fires(s, utc("2026-10-24T12:00:00Z"), utc("2026-10-26T12:00:00Z"))
	want := []time.Time{
		utc("2026-10-25T00:30:00Z"), // 02:30 CEST; not again at 02:30 CET (01:30 UTC)
		utc("2026-10-26T01:30:00Z"), // 02:30 CET
	}
	if !equalTimes(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	// Hourly: the repeated 02:00 fires once; 03:00 CET follows 02:00 CEST.
	h := mustParse(t, "0 * * * *", "Europe/Berlin")
	got = fires(h, utc("2026-10-24T23:30:00Z"), utc("2026-10-25T02:30:00Z"))
	want = []time.Time{
		utc("2026-10-25T00:00:00Z"), // 02:00 CEST; not again at 02:00 CET (01:00 UTC)
		utc("2026-10-25T02:00:00Z"), // 03:00 CET
	}
	if !equalTimes(got, want) {
		t.Fatalf("hourly: got %v, want %v", got, want)
	}
	// Asked from inside the repeated hour (02:40 CET), the next 02:30 is tomorrow's.
	if got := s.Next(utc("2026-10-25T01:40:00Z")); !got.Equal(utc("2026-10-26T01:30:00Z")) {
		t.Fatalf("from the second 02:40: %v", got)
	}
}

func equalTimes(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}
