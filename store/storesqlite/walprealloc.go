package storesqlite

import (
	"context"
	"errors"
	"fmt"
	"os"
)

// preallocateWAL writes zeros to the WAL file from its end up to n bytes (see
// Config.WALPreallocate). It runs on the write connection inside BEGIN
// IMMEDIATE, so that no connection of any process appends frames meanwhile: the
// zeros only ever land past the log's last frame. SQLite takes them for the
// end of the log (a frame of zeros fails its checksum) and overwrites them.
func (s *Store) preallocateWAL(ctx context.Context, n int64) error {
	return s.submit(ctx, &request{ctx: ctx, done: make(chan error, 1), alone: func(w *writer) error {
		if _, err := w.conn.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
			return fmt.Errorf("locking the WAL: %w", err)
		}
		err := zeroFill(s.cfg.Path+"-wal", n)
		if _, rbErr := w.conn.ExecContext(context.WithoutCancel(ctx), "ROLLBACK"); rbErr != nil {
			err = errors.Join(err, fmt.Errorf("unlocking the WAL: %w", rbErr))
		}
		return err
	}})
}

// zeroFill extends the file at path with zeros to n bytes and syncs it; a file
// already that long is left alone. On failure it truncates the file back.
func zeroFill(path string, n int64) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	size := st.Size()
	if size >= n {
		return nil
	}
	zeros := make([]byte, 1<<20)
	for off := size; off < n; {
		chunk := zeros[:min(int64(len(zeros)), n-off)]
		if _, err := f.WriteAt(chunk, off); err != nil {
			return errors.Join(err, f.Truncate(size))
		}
		off += int64(len(chunk))
	}
	if err := f.Sync(); err != nil {
		return errors.Join(err, f.Truncate(size))
	}
	return nil
}
