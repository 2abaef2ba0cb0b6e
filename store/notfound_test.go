package store_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/store"
)

// A NotFoundError reads as the other wrapped errors of the stores, and is
// ErrNotFound to errors.Is, also wrapped again.
func TestNotFoundError(t *testing.T) {
	hash := bundle.Hash("9f2c3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d1e2f")
	var err error = &store.NotFoundError{Backend: "memstore", Op: "stat", Hash: hash}
	if got, want := err.Error(), "memstore: stat 9f2c3a4b5c6d: bundle not found"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	wrapped := fmt.Errorf("stat %s: %w", hash, err)
	if !errors.Is(wrapped, store.ErrNotFound) {
		t.Errorf("%v is not ErrNotFound", wrapped)
	}
	var nf *store.NotFoundError
	if !errors.As(wrapped, &nf) || nf.Hash != hash || nf.Op != "stat" {
		t.Errorf("errors.As(%v) = %+v", wrapped, nf)
	}
	if errors.Is(err, store.ErrClosed) {
		t.Errorf("%v is ErrClosed", err)
	}
}
