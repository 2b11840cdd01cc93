//go:build !unix

package server

import "net"

// canProbe: peerClosed cannot look into a socket here.
func canProbe(net.Conn) bool { return false }

// peerClosed cannot look into a socket here: a stream whose client went is
// noticed at its next write.
func peerClosed(net.Conn) bool { return false }
