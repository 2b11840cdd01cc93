//go:build unix && !linux

package storesqlite

import (
	"errors"

	"golang.org/x/sys/unix"
)

// fallocate makes the file fd n bytes long by writing zeros (no system call
// that allocates without writing is portable across these systems).
func fallocate(fd int, n int64) error {
	zeros := make([]byte, 1<<20)
	for off := int64(0); off < n; {
		w, err := unix.Pwrite(fd, zeros[:min(int64(len(zeros)), n-off)], off)
		if err != nil {
			return err
		}
		if w == 0 {
			return errors.New("short write")
		}
		off += int64(w)
	}
	return nil
}
