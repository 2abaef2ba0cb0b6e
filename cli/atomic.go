package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// writeFileAtomic writes what write produces to path: into a temporary file
// in the same directory, fsynced, then renamed over path, so that path is
// either untouched or complete. When write fails the temporary file is
// removed and path is not touched. It returns the number of bytes written.
func writeFileAtomic(path string, perm os.FileMode, write func(io.Writer) error) (n int64, err error) {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return 0, fmt.Errorf("create temporary file for %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	cw := &countingWriter{w: f}
	if err := write(cw); err != nil {
		return 0, err
	}
	if err := f.Chmod(perm); err != nil {
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	// The rename is durable once the directory is synced; failing to sync
	// it leaves a complete file in place, so it is not an error.
	if d, derr := os.Open(dir); derr == nil {
		_ = d.Sync()
		d.Close()
	}
	return cw.n, nil
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
