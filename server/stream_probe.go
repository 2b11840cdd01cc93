package server

import (
	"net"
	"sync"
	"time"
)

// A stream on a connection it took over (serveStream) holds no reader on it,
// to stay small: a client that goes would be noticed only when a write fails,
// one or two heartbeats later, and its connection and its place in MaxStreams
// held meanwhile. The probe looks at those connections every
// Config.StreamProbeInterval without reading them (peerClosed) and ends the
// streams whose client closed its side. One goroutine runs it while such
// streams are open.

// streamProbe is the server's set of streams on connections they took over.
type streamProbe struct {
	mu      sync.Mutex
	streams map[*probedStream]struct{}
	running bool // the probe's goroutine runs
}

// probedStream is a stream the probe watches: its connection, and what the
// probe closes when its client went (streams.Options.Gone).
type probedStream struct {
	conn net.Conn
	gone chan struct{}
}

// watch adds a stream to the probe, starting its goroutine if none runs; the
// probe closes gone when the stream's client went. The returned function
// removes the stream.
func (s *Server) watch(conn net.Conn, gone chan struct{}) (unwatch func()) {
	ps := &probedStream{conn: conn, gone: gone}
	p := &s.probe
	p.mu.Lock()
	if p.streams == nil {
		p.streams = map[*probedStream]struct{}{}
	}
	p.streams[ps] = struct{}{}
	if !p.running {
		p.running = true
		s.streamWG.Add(1)
		go s.runProbe()
	}
	p.mu.Unlock()
	return func() {
		p.mu.Lock()
		delete(p.streams, ps)
		p.mu.Unlock()
	}
}

// runProbe probes the watched streams every StreamProbeInterval until none is
// left or the server drains (each stream then ends on its own).
func (s *Server) runProbe() {
	defer s.streamWG.Done()
	t := time.NewTicker(s.cfg.StreamProbeInterval)
	defer t.Stop()
	var batch []*probedStream
	for {
		select {
		case <-s.draining.Done():
			s.probe.mu.Lock()
			s.probe.running = false
			s.probe.mu.Unlock()
			return
		case <-t.C:
		}
		p := &s.probe
		p.mu.Lock()
		if len(p.streams) == 0 {
			p.running = false
			p.mu.Unlock()
			return
		}
		batch = batch[:0]
		for ps := range p.streams {
			batch = append(batch, ps)
		}
		p.mu.Unlock()
		for _, ps := range batch {
			if !peerClosed(ps.conn) {
				continue
			}
			p.mu.Lock()
			if _, ok := p.streams[ps]; ok { // else it ended meanwhile
				delete(p.streams, ps)
				close(ps.gone)
			}
			p.mu.Unlock()
		}
		clear(batch) // hold no stream that ends before the next pass
	}
}
