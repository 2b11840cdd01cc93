package main

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for the flusher's goroutine and the test's.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// The server's log gathers Info lines and writes them within logFlushEvery; a
// warning is written at once with what came before it; Close writes the rest.
func TestServerLogBuffered(t *testing.T) {
	out := &syncBuffer{}
	logger, closeLog := serverLogger(out, true)
	logger.Info("request", "n", 1)
	if s := out.String(); s != "" {
		t.Fatalf("an Info line was written at once: %q", s)
	}
	deadline := time.Now().Add(10 * logFlushEvery)
	for !strings.Contains(out.String(), "n=1") {
		if time.Now().After(deadline) {
			t.Fatal("the Info line was not written within its flush interval")
		}
		time.Sleep(logFlushEvery / 4)
	}
	logger.Info("request", "n", 2)
	logger.Warn("trouble")
	if s := out.String(); !strings.Contains(s, "n=2") || !strings.Contains(s, "trouble") {
		t.Fatalf("after a warning: %q, want it and the line before it written", s)
	}
	logger.With(slog.String("k", "v")).Info("last")
	if err := closeLog(); err != nil {
		t.Fatal(err)
	}
	if s := out.String(); !strings.Contains(s, `msg=last k=v`) {
		t.Fatalf("after Close: %q, want the last line", s)
	}
}
