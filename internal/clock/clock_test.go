package clock

import (
	"testing"
	"time"
)

func TestFakeFiresDueTimersInOrder(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	late, early := f.NewTimer(2*time.Hour), f.NewTimer(time.Hour)
	fired := make(chan struct{})
	f.AfterFunc(90*time.Minute, func() { close(fired) })
	if f.Timers() != 3 {
		t.Fatalf("timers = %d, want 3", f.Timers())
	}
	if next, ok := f.Next(); !ok || !next.Equal(start.Add(time.Hour)) {
		t.Fatalf("next = %v %v", next, ok)
	}
	f.Advance(time.Hour)
	if got := <-early.C(); !got.Equal(start.Add(time.Hour)) {
		t.Fatalf("early fired at %v", got)
	}
	select {
	case <-late.C():
		t.Fatal("late timer fired early")
	default:
	}
	f.Advance(time.Hour)
	<-fired
	<-late.C()
	if f.Timers() != 0 {
		t.Fatalf("timers left: %d", f.Timers())
	}
}

func TestFakeStopAndReset(t *testing.T) {
	t.Parallel()
	f := NewFake(time.Unix(0, 0))
	tm := f.NewTimer(time.Minute)
	added := f.TimerAdded()
	if !tm.Stop() || tm.Stop() {
		t.Fatal("Stop should report active once")
	}
	f.Advance(time.Hour)
	select {
	case <-tm.C():
		t.Fatal("stopped timer fired")
	default:
	}
	tm.Reset(time.Second)
	<-added // the reset started a timer
	f.Advance(time.Second)
	<-tm.C()
	tm.Reset(0) // due at once
	<-tm.C()
}

func TestRealClock(t *testing.T) {
	t.Parallel()
	c := Or(nil)
	tm := c.NewTimer(time.Millisecond)
	<-tm.C()
	done := make(chan struct{})
	c.AfterFunc(time.Millisecond, func() { close(done) })
	<-done
	if c.Now().IsZero() {
		t.Fatal("zero time")
	}
}

func TestFakeTimerAt(t *testing.T) {
	t.Parallel()
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := NewFake(start)
	tm := f.NewTimer(time.Minute)
	if !f.TimerAt(start.Add(time.Minute)) || f.TimerAt(start.Add(time.Second)) {
		t.Fatal("TimerAt does not find the timer at its time only")
	}
	tm.Reset(time.Hour)
	if f.TimerAt(start.Add(time.Minute)) || !f.TimerAt(start.Add(time.Hour)) {
		t.Fatal("TimerAt after Reset does not find the timer at its new time only")
	}
	tm.Stop()
	if f.TimerAt(start.Add(time.Hour)) {
		t.Fatal("TimerAt finds a stopped timer")
	}
}

// TestFakeResetWhileFiring: a timer's owner may reset it, woken by something
// else, while Advance fires the timers due; under -race this failed when
// Advance ordered the due timers after releasing its lock (CI's race run met
// it in trellistest's examples: a claim loop resetting its poll timer).
func TestFakeResetWhileFiring(t *testing.T) {
	t.Parallel()
	f := NewFake(time.Unix(0, 0))
	timers := make([]Timer, 8)
	for i := range timers {
		timers[i] = f.NewTimer(time.Duration(i) * time.Millisecond)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 2000 {
			for _, tm := range timers {
				tm.Reset(time.Millisecond)
			}
		}
	}()
	for {
		select {
		case <-done:
			return
		default:
			f.Advance(time.Millisecond)
		}
	}
}
