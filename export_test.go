package trellis

import "github.com/trellis-dev/trellis/internal/httpc"

// RemoteSentinel is the sentinel the client maps a server's problem code and
// title to (nil when none), for the drift test against server/errors.go.
func RemoteSentinel(code, title string) error {
	return remoteErr(&httpc.Problem{Code: code, Title: title, Status: 400}).(*RemoteError).err
}
