//go:build !linux

package bundle

import (
	"errors"
	"os"
)

// mapTemp is not implemented off Linux: Read keeps the bytes in the heap.
func mapTemp(string, int64) ([]byte, *os.File, error) {
	return nil, nil, errors.New("bundle: spill: only on Linux")
}

func release([]byte) {}

func populate([]byte) bool { return false }

func unmap([]byte) {}
