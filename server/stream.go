package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/trellis-dev/trellis/internal/streams"
	"github.com/trellis-dev/trellis/store"
)

// streamWriteGrace is how long past a heartbeat a stream's write may take
// before the connection is given up.
const streamWriteGrace = 30 * time.Second

// streamRun answers GET .../runs/{id}/stream: the run's stream as server-sent
// events (docs/streams.md). It reads the store from the cursor and waits for
// the run's wake-ups between reads, holding nothing in memory; it ends after
// the run's final event, when the client goes, or when the server shuts down.
func (s *Server) streamRun(w http.ResponseWriter, r *http.Request, c *call) error {
	q := parseQuery(r, streamParams)
	if q.err != nil {
		return q.err
	}
	after, err := streamCursor(q.str("after"), r.Header.Get("Last-Event-ID"))
	if err != nil {
		return err
	}
	rc := http.NewResponseController(w)
	if r.ProtoMajor == 1 {
		if conn, _, err := rc.Hijack(); err == nil {
			c.streamOwned = true
			s.streamWG.Add(1)
			go s.serveStream(conn, c.ns, c.run.ID, c.run.Workflow, after, c.streamEnd, c.streamClose) // owns conn, the count in MaxStreams and the registration
			return nil
		}
	}
	s.observer.AddStreamSubscribers(1)
	defer s.observer.AddStreamSubscribers(-1)
	// A stream outlives the server's timeouts: no read deadline (the request
	// was read; a read timeout would cancel the request's context), and a write
	// deadline pushed on before each write.
	_ = rc.SetReadDeadline(time.Time{})
	extend := func() { _ = rc.SetWriteDeadline(time.Now().Add(s.cfg.StreamHeartbeat + streamWriteGrace)) }
	extend()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no") // nginx: do not buffer
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	if err := rc.Flush(); err != nil {
		return nil // the client went
	}
	var buf bytes.Buffer
	err = streams.Follow(r.Context(), s.store, c.ns, c.run.ID, after, streams.Options{
		Heartbeat: s.cfg.StreamHeartbeat, Clock: s.cfg.Clock,
		Idle: func() error {
			extend()
			if _, err := io.WriteString(w, ": keep-alive\n\n"); err != nil {
				return err
			}
			return rc.Flush()
		},
		Stop:  s.draining.Done(),
		End:   c.streamEnd,
		Flush: rc.Flush,
	}, func(ev *store.StreamEvent) error {
		extend()
		buf.Reset()
		writeEvent(&buf, ev)
		_, err := w.Write(buf.Bytes())
		return err
	})
	if err != nil && !errors.Is(err, streams.ErrStopped) && r.Context().Err() == nil {
		// The response has begun: the error can only be logged, and the
		// stream ends without its final event (a client reconnects).
		s.cfg.Logger.Warn("stream ended", "run_id", c.run.ID, "workflow", c.run.Workflow, "err", err)
	}
	return nil
}

// streamHead is the head of a stream's answer on a connection it took over: the
// body runs until the connection closes.
const streamHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n" +
	"X-Accel-Buffering: no\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n"

// serveStream serves a stream on a connection taken over from net/http: the
// request's goroutine (with the stack it grew authorizing the call) and its
// background reader end, and this goroutine, which mostly waits, stays small.
// A client that goes is noticed by the probe (stream_probe.go), or at the next
// write (an event or a heartbeat).
// It ends like streamRun's in-handler stream, then closes the connection.
//
// It keeps the run's ID and workflow, not its record: ten thousand streams held
// ten thousand records (about 2 KB of memory per stream). It ends too when end
// closes (the registry ended it), and unregisters it (nil under Insecure).
func (s *Server) serveStream(conn net.Conn, ns, runID, workflow string, after int64, end <-chan struct{}, unregister func()) {
	defer s.streamWG.Done()
	defer s.streams.Add(-1)
	if unregister != nil {
		defer unregister()
	}
	defer conn.Close()
	s.observer.AddStreamSubscribers(1)
	defer s.observer.AddStreamSubscribers(-1)
	var buf []byte
	write := func() error {
		if len(buf) == 0 {
			return nil
		}
		_ = conn.SetWriteDeadline(time.Now().Add(s.cfg.StreamHeartbeat + streamWriteGrace))
		_, err := conn.Write(buf)
		buf = buf[:0]
		if cap(buf) > 64<<10 {
			buf = nil // do not keep a large page's buffer while idle
		}
		return err
	}
	buf = append(buf, streamHead...)
	if write() != nil {
		return
	}
	// The probe ends the stream when its client goes (the read deadline the
	// request was read with would keep it from looking). A connection it
	// cannot look into (TLS) is left out: its stream ends at a failed write.
	var gone chan struct{} // a channel, not a context: a stream stays small
	if canProbe(conn) {
		_ = conn.SetReadDeadline(time.Time{})
		gone = make(chan struct{})
		defer s.watch(conn, gone)()
	}
	var b bytes.Buffer
	err := streams.Follow(context.Background(), s.store, ns, runID, after, streams.Options{
		Heartbeat: s.cfg.StreamHeartbeat, Clock: s.cfg.Clock,
		Idle: func() error {
			buf = append(buf, ": keep-alive\n\n"...)
			return write()
		},
		Stop:  s.draining.Done(),
		Gone:  gone,
		End:   end,
		Flush: write,
	}, func(ev *store.StreamEvent) error {
		b.Reset()
		writeEvent(&b, ev)
		buf = append(buf, b.Bytes()...)
		return nil
	})
	var ne net.Error
	if err != nil && !errors.Is(err, streams.ErrStopped) && !errors.As(err, &ne) && !errors.Is(err, net.ErrClosed) {
		s.cfg.Logger.Warn("stream ended", "run_id", runID, "workflow", workflow, "err", err)
	}
}

// writeEvent writes ev in the event-stream format: id, event, and its JSON data
// (one data line per line of it).
func writeEvent(b *bytes.Buffer, ev *store.StreamEvent) {
	b.WriteString("id: ")
	b.WriteString(strconv.FormatInt(ev.Sequence, 10))
	b.WriteString("\nevent: ")
	b.WriteString(ev.Name)
	data := ev.Data
	if len(data) == 0 {
		data = []byte("null")
	}
	for line := range bytes.Lines(data) {
		b.WriteString("\ndata: ")
		b.Write(bytes.TrimRight(line, "\r\n"))
	}
	b.WriteString("\n\n")
}

// streamCursor is the sequence a stream starts after: the Last-Event-ID header
// of a reconnecting client, else the after parameter (a sequence, or "now"),
// else 0 (every event).
func streamCursor(after, lastEventID string) (int64, error) {
	n := int64(0)
	switch after {
	case "":
	case "now":
		n = streams.Now
	default:
		v, err := strconv.ParseInt(after, 10, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf(`%w: after must be an event sequence (a non-negative integer) or "now", got %q`, ErrInvalidArgument, after)
		}
		n = v
	}
	if lastEventID != "" {
		v, err := strconv.ParseInt(lastEventID, 10, 64)
		if err != nil || v < 0 {
			return 0, fmt.Errorf("%w: Last-Event-ID must be an event sequence (a non-negative integer), got %q", ErrInvalidArgument, lastEventID)
		}
		n = v
	}
	return n, nil
}
