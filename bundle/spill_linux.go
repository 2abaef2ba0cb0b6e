package bundle

import (
	"fmt"
	"os"
	"syscall"
)

// mapTemp maps a temporary file of size bytes in dir, shared and writable,
// and unlinks it. The file is sparse: only the pages written take space.
func mapTemp(dir string, size int64) (mem []byte, f *os.File, err error) {
	f, err = os.CreateTemp(dir, "pyrula-bundle-*")
	if err != nil {
		return nil, nil, fmt.Errorf("bundle: spill: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	if err := os.Remove(f.Name()); err != nil {
		return nil, nil, fmt.Errorf("bundle: spill: %w", err)
	}
	if err := f.Truncate(size); err != nil {
		return nil, nil, fmt.Errorf("bundle: spill: %w", err)
	}
	mem, err = syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("bundle: spill: map %d bytes: %w", size, err)
	}
	// No read-ahead: a fault on a page of the file's hole reads (zeroes)
	// that page, not the pages after it.
	_ = syscall.Madvise(mem, syscall.MADV_RANDOM)
	return mem, f, nil
}

// release hands the resident pages of mem back to the kernel; their bytes
// stay in the file.
func release(mem []byte) {
	if len(mem) > 0 {
		_ = syscall.Madvise(mem, syscall.MADV_DONTNEED)
	}
}

// unmap unmaps a spill's mapping.
func unmap(mem []byte) { _ = syscall.Munmap(mem) }

// madvPopulateWrite is MADV_POPULATE_WRITE (Linux 5.14).
const madvPopulateWrite = 23

// populate makes the pages of mem ready to be written, in one call; an
// older kernel refuses it and the pages are faulted in as they are written.
func populate(mem []byte) {
	if len(mem) > 0 {
		_ = syscall.Madvise(mem, madvPopulateWrite)
	}
}
