//go:build unix

package storesqlite

import (
	"errors"

	"golang.org/x/sys/unix"
)

// freeSpace returns the bytes of the volume of dir that an unprivileged
// writer may use.
func freeSpace(dir string) (int64, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true //nolint:unconvert // field types differ between systems
}

// allocate makes the file at path hold n bytes of the volume, without writing
// them where the system allows (fallocate), else by writing zeros; on failure
// the file is left empty.
func allocate(path string, n int64) error {
	f, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return err
	}
	err = fallocate(f, n)
	if err == nil {
		err = unix.Fsync(f)
	}
	if err != nil {
		_ = unix.Ftruncate(f, 0)
	}
	return errors.Join(err, unix.Close(f))
}
