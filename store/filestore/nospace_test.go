package filestore

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/pyrula/caseworker/store/storetest"
)

// fullAfter is a writer that takes n bytes, then fails every write as a
// file on a full file system does (os.File wraps ENOSPC in a PathError).
type fullAfter struct {
	f    io.Writer
	n    int
	name string
}

func (w *fullAfter) Write(p []byte) (int, error) {
	if len(p) <= w.n {
		w.n -= len(p)
		return w.f.Write(p)
	}
	k, err := w.f.Write(p[:w.n])
	w.n = 0
	if err != nil {
		return k, err
	}
	return k, &fs.PathError{Op: "write", Path: w.name, Err: syscall.ENOSPC}
}

// A full file system: the file system runs out of space in the middle of
// a Put's temp file (injected: a test cannot count on mounting a small
// tmpfs; cmd/worker's broker fault test does so where it can). The Put
// fails with an error that names ENOSPC and the store's directory and
// wraps syscall.ENOSPC; the partly written temp file is removed and no
// bundle is visible; once space is back the same Put succeeds.
func TestPutOnAFullFileSystem(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	c := storetest.Bundle(t, 1)
	blob := blobOf(t, c)
	s.tempWriter = func(f io.Writer) io.Writer {
		return &fullAfter{f: f, n: len(blob) / 2, name: "temp"}
	}
	_, err := s.Put(t.Context(), c.Hash(), strings.NewReader(string(blob)))
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Put on a full file system: %v, want ENOSPC", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "ENOSPC") || !strings.Contains(msg, s.Dir()) {
		t.Errorf("error %q does not name ENOSPC and the store's directory", msg)
	}
	h := string(c.Hash())
	if got, want := tree(t, s.Dir()), []string{h[:2]}; !slices.Equal(got, want) {
		t.Errorf("after a Put that ran out of space the store holds %q, want only %q (no temp file, no bundle)", got, want)
	}
	if _, err := s.Stat(t.Context(), c.Hash()); err == nil {
		t.Error("the bundle is visible after a failed Put")
	}

	s.tempWriter = nil // space is back
	created, err := s.Put(t.Context(), c.Hash(), strings.NewReader(string(blob)))
	if err != nil || !created {
		t.Fatalf("Put once space is back: created %v, %v", created, err)
	}
	got, err := os.ReadFile(filepath.Join(s.Dir(), h[:2], h+".case"))
	if err != nil || string(got) != string(blob) {
		t.Fatalf("the stored bundle differs from its blob (%v)", err)
	}
}
