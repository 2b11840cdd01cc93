package main

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"sync"
	"time"
)

// logBuffer is the server's log output (stderr): lines are gathered and
// written a flush at a time, at most logFlushEvery after they were logged, so
// that the access log's line per request costs no write of its own (one
// system call a line was about a third of its cost in `trellis bench
// --server` w1). A record of level Warn or above is written at once, with
// what came before it; Close writes the rest. A crash loses at most the last
// logFlushEvery of Info lines.
type logBuffer struct {
	mu   sync.Mutex
	w    *bufio.Writer
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// logFlushEvery is how long a line may wait in a logBuffer.
const logFlushEvery = 100 * time.Millisecond

func newLogBuffer(w io.Writer) *logBuffer {
	b := &logBuffer{w: bufio.NewWriterSize(w, 64<<10), stop: make(chan struct{}), done: make(chan struct{})}
	go b.loop()
	return b
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Write(p)
}

// Flush writes what is buffered.
func (b *logBuffer) Flush() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.w.Flush()
}

func (b *logBuffer) loop() {
	defer close(b.done)
	t := time.NewTicker(logFlushEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			_ = b.Flush()
		case <-b.stop:
			return
		}
	}
}

// Close stops the flushing goroutine and writes what is left. Idempotent.
func (b *logBuffer) Close() error {
	b.once.Do(func() {
		close(b.stop)
		<-b.done
	})
	return b.Flush()
}

// flushingHandler writes a record of level Warn or above at once (with the
// buffered lines before it).
type flushingHandler struct {
	slog.Handler
	buf *logBuffer
}

func (h flushingHandler) Handle(ctx context.Context, r slog.Record) error {
	err := h.Handler.Handle(ctx, r)
	if r.Level >= slog.LevelWarn {
		_ = h.buf.Flush()
	}
	return err
}

func (h flushingHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return flushingHandler{h.Handler.WithAttrs(as), h.buf}
}

func (h flushingHandler) WithGroup(name string) slog.Handler {
	return flushingHandler{h.Handler.WithGroup(name), h.buf}
}
