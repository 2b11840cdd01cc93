package trellis

import "github.com/trellis-dev/trellis/internal/httpc"

// RemoteSentinel is the sentinel the client maps a server's problem code to
// (nil when none), for the test that the table reads back both ways.
func RemoteSentinel(code string) error {
	return remoteErr(&httpc.Problem{Code: code, Title: "any title", Status: 400}).(*RemoteError).err
}
