package server

import (
	"context"
	"net"
	"testing"
	"time"
)

// A stream whose client went ends without waiting for a write to fail: with a
// heartbeat of an hour, only the probe can notice it, and it frees the
// stream's place in MaxStreams.
func TestStreamEndsWhenItsClientGoes(t *testing.T) {
	e := newEnv(t, storeURLs(t)["sqlite"](t), func(c *Config) {
		c.StreamHeartbeat = time.Hour
		c.StreamProbeInterval = 20 * time.Millisecond
	})
	if err := e.worker.Register(context.Background(), streamWF); err != nil {
		t.Fatal(err)
	}
	run := e.start("streamer", nil, nil)
	waitStreams := func(want int64) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for e.srv.streams.Load() != want {
			if time.Now().After(deadline) {
				t.Fatalf("%d streams open, want %d", e.srv.streams.Load(), want)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	kept := e.openStream(run.ID, "?after=now", "reader")
	gone := e.openStream(run.ID, "?after=now", "reader")
	waitStreams(2)
	gone.close()
	waitStreams(1) // the other client stays: its stream goes on
	e.sendGo(run.ID)
	for {
		ev, ok := kept.next(t)
		if !ok {
			t.Fatal("the stream of the client that stayed ended before its run")
		}
		if ev.name == "run.succeeded" {
			break
		}
	}
	e.waitRun(run.ID)
	waitStreams(0)
}

// peerClosed tells a connection its peer closed from one it keeps open, with
// or without bytes to read, and reads nothing.
func TestPeerClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if peerClosed(conn) {
		t.Fatal("an open connection seen closed")
	}
	if _, err := client.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(50 * time.Millisecond)
	if peerClosed(conn) {
		t.Fatal("a connection with a byte to read seen closed")
	}
	var b [1]byte
	if n, err := conn.Read(b[:]); n != 1 || b[0] != 'x' {
		t.Fatalf("the byte peeked at was consumed: read %d %q, %v", n, b[:n], err)
	}
	client.Close()
	deadline := time.Now().Add(5 * time.Second)
	for !peerClosed(conn) {
		if time.Now().After(deadline) {
			t.Fatal("a connection its peer closed still seen open")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
