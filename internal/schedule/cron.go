// Package schedule is the scheduler of Trellis: cron expressions in a time zone
// (parsed by github.com/robfig/cron/v3, with daylight-saving behaviour of our own),
// and the leader that fires schedules' ticks, fenced by the store's scheduler lease
// (see docs/schedules.md).
package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// ErrInvalidSpec wraps every error of Parse.
var ErrInvalidSpec = errors.New("invalid schedule")

// parser accepts 5 fields, an optional seconds field first (6 fields), and the
// descriptors (@hourly, @daily, @every 1s, ...).
var parser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom |
	cron.Month | cron.Dow | cron.Descriptor)

// Spec is a parsed cron expression in a time zone.
type Spec struct {
	loc *time.Location
	// wall is the expression over wall-clock times (evaluated in UTC, where no
	// time is skipped or repeated); nil for @every.
	wall *cron.SpecSchedule
	// every is the interval of an @every expression.
	every time.Duration
}

// Parse parses a cron expression and an IANA time zone ("" is UTC). The zone is
// given on its own: a TZ= or CRON_TZ= prefix in the expression is refused.
func Parse(expr, zone string) (*Spec, error) {
	expr = strings.TrimSpace(expr)
	if expr == "" {
		return nil, fmt.Errorf("%w: empty cron expression", ErrInvalidSpec)
	}
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return nil, fmt.Errorf("%w: cron expression %q: give the time zone on its own, not as a prefix", ErrInvalidSpec, expr)
	}
	loc, err := LoadZone(zone)
	if err != nil {
		return nil, err
	}
	if d, ok := strings.CutPrefix(expr, "@every "); ok {
		// robfig/cron rounds a shorter interval up to 1s without a word.
		if every, err := time.ParseDuration(strings.TrimSpace(d)); err == nil && every < time.Second {
			return nil, fmt.Errorf("%w: cron expression %q: the interval must be at least 1s", ErrInvalidSpec, expr)
		}
	}
	sched, err := parser.Parse(expr)
	if err != nil {
		return nil, fmt.Errorf("%w: cron expression %q: %v", ErrInvalidSpec, expr, err)
	}
	s := &Spec{loc: loc}
	switch c := sched.(type) {
	case *cron.SpecSchedule:
		w := *c
		w.Location = time.UTC
		s.wall = &w
	case cron.ConstantDelaySchedule:
		if c.Delay < time.Second {
			return nil, fmt.Errorf("%w: cron expression %q: the interval must be at least 1s", ErrInvalidSpec, expr)
		}
		s.every = c.Delay
	default:
		return nil, fmt.Errorf("%w: cron expression %q: unsupported form", ErrInvalidSpec, expr)
	}
	if s.Next(time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)).IsZero() {
		return nil, fmt.Errorf("%w: cron expression %q never fires", ErrInvalidSpec, expr)
	}
	return s, nil
}

// LoadZone loads an IANA time zone; "" is UTC. "Local" is refused: a schedule
// must not depend on the zone of the process that happens to lead.
func LoadZone(zone string) (*time.Location, error) {
	switch zone {
	case "", "UTC":
		return time.UTC, nil
	case "Local":
		return nil, fmt.Errorf("%w: time zone %q: name an IANA zone, e.g. Europe/Berlin", ErrInvalidSpec, zone)
	}
	loc, err := time.LoadLocation(zone)
	if err != nil {
		return nil, fmt.Errorf("%w: unknown time zone %q (want an IANA name such as Europe/Berlin)", ErrInvalidSpec, zone)
	}
	return loc, nil
}

// Next returns the first fire time strictly after after, or the zero time if
// there is none.
//
// A cron expression names wall-clock times. Where a daylight-saving change skips
// a wall-clock time (spring forward), a tick at that time fires once, at the first
// instant after the gap (in Europe/Berlin, 02:30 on the last Sunday of March fires
// at 03:00 CEST); several skipped times that land on that instant fire once. Where
// a change repeats wall-clock times (fall back), each of them fires once, at its
// first occurrence (02:30 fires at 02:30 CEST, not again at 02:30 CET). An @every
// interval counts elapsed time and ignores the zone.
//
// robfig/cron's own Next, in a zone with daylight saving, skips a tick in the gap
// and can fire a repeated one twice; hence this walk over wall-clock times.
func (s *Spec) Next(after time.Time) time.Time {
	if s.wall == nil {
		return after.Truncate(time.Second).Add(s.every)
	}
	w := wallOf(after.In(s.loc))
	// Wall times before after's own come back only in a repeated hour; a bound
	// keeps a broken zone from looping for ever (a repeated hour of a per-second
	// expression needs 3,600 steps).
	for range 100000 {
		w = s.wall.Next(w)
		if w.IsZero() {
			return time.Time{}
		}
		if t := instant(w, s.loc); t.After(after) {
			return t
		}
	}
	return time.Time{}
}

// SkipTo returns a time from which Next finds the first tick at or after floor,
// given the last handled tick from (before floor): ticks in between are skipped.
// An @every interval keeps its phase (the ticks stay from + k × interval).
func (s *Spec) SkipTo(from, floor time.Time) time.Time {
	if !from.Before(floor) {
		return from
	}
	if s.wall == nil {
		k := floor.Sub(from.Truncate(time.Second)) / s.every // whole intervals before floor
		if k > 0 {
			k-- // Next adds one; land on the last tick before floor or the first at it
		}
		return from.Truncate(time.Second).Add(k * s.every)
	}
	return floor.Add(-time.Nanosecond)
}

// wallOf returns t's wall-clock reading as a UTC time.
func wallOf(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// instant returns the first instant whose wall-clock reading in loc is w (a UTC
// time holding a wall-clock reading); when no instant has it (a gap), the first
// instant after the gap.
func instant(w time.Time, loc *time.Location) time.Time {
	var best time.Time
	for _, probe := range []time.Duration{-36 * time.Hour, 0, 36 * time.Hour} {
		_, off := w.Add(probe).In(loc).Zone()
		c := w.Add(-time.Duration(off) * time.Second)
		if wallOf(c.In(loc)).Equal(w) && (best.IsZero() || c.Before(best)) {
			best = c
		}
	}
	if !best.IsZero() {
		return best
	}
	// In a gap: read w with the offset before the gap, which lands after it, in
	// the zone that starts at the gap's end.
	_, off := w.Add(-36 * time.Hour).In(loc).Zone()
	c := w.Add(-time.Duration(off) * time.Second).In(loc)
	start, _ := c.ZoneBounds()
	if start.IsZero() {
		return c
	}
	return start
}
