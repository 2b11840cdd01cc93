package storesqlite

import "golang.org/x/sys/unix"

// fallocate allocates n bytes of the file fd without writing them.
func fallocate(fd int, n int64) error {
	return unix.Fallocate(fd, 0, 0, n)
}
