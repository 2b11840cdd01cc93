//go:build unix

package server

import (
	"errors"
	"net"
	"syscall"
)

// canProbe reports whether peerClosed can look into conn: a socket, not a
// connection wrapped in TLS.
func canProbe(conn net.Conn) bool {
	_, ok := conn.(syscall.Conn)
	return ok
}

// peerClosed reports whether the peer of conn has closed its side or reset
// the connection, without reading anything or waiting: a peek at the socket
// that finds its end (or a reset). Bytes waiting to be read, or a connection
// it cannot look into (TLS), count as open.
func peerClosed(conn net.Conn) bool {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	var b [1]byte
	err = raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// Its end, a reset, or any error a socket keeps for its next read
		// (a keep-alive timeout, an unreachable host); none waiting: open.
		closed = n == 0 && err == nil || err != nil && !errors.Is(err, syscall.EAGAIN) &&
			!errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR)
		return true // done: never wait for the socket to be readable
	})
	return closed || errors.Is(err, net.ErrClosed)
}
