//go:build !unix

package storesqlite

// freeSpace cannot read free space on this system: the store keeps no disk
// reserve.
func freeSpace(string) (int64, bool) { return 0, false }

func allocate(string, int64) error { return nil }
