package bundle

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// tmpfsMagic is the file system type of a tmpfs (statfs(2)).
const tmpfsMagic = 0x01021994

// mapTemp maps a temporary file of size bytes in dir, shared and writable,
// and unlinks it. Its blocks are reserved at once (fallocate: no bytes are
// written): a write to a mapped page the file system could not back would
// kill the process (SIGBUS) where a failed reservation is an error, and
// Read keeps the bytes in memory instead. A dir on a tmpfs is refused: its
// pages are memory, which spilling there would not save.
func mapTemp(dir string, size int64) (mem []byte, f *os.File, err error) {
	if dir == "" {
		dir = os.TempDir()
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return nil, nil, fmt.Errorf("bundle: spill: %w", err)
	}
	if fs.Type == tmpfsMagic {
		return nil, nil, fmt.Errorf("bundle: spill: %s is a tmpfs (memory)", dir)
	}
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
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		return nil, nil, fmt.Errorf("bundle: spill: reserve %d bytes: %w", size, err)
	}
	mem, err = syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, nil, fmt.Errorf("bundle: spill: map %d bytes: %w", size, err)
	}
	// No read-ahead: a fault on a page not written yet reads (zeroes) that
	// page, not the pages after it.
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

// madvPopulateWrite is MADV_POPULATE_WRITE (Linux 5.14).
const madvPopulateWrite = 23

// populate maps mem's pages writable in one call, ahead of the writes that
// would each take a page fault (about half the time of writing a spill);
// false when the kernel cannot (before 5.14).
func populate(mem []byte) bool {
	if len(mem) == 0 {
		return true
	}
	_, _, errno := syscall.Syscall(syscall.SYS_MADVISE, uintptr(unsafe.Pointer(unsafe.SliceData(mem))), uintptr(len(mem)), madvPopulateWrite)
	return errno == 0
}

// unmap unmaps a spill's mapping.
func unmap(mem []byte) { _ = syscall.Munmap(mem) }
