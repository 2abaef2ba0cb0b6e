package store_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/store/storetest"
)

// wantCode fails unless err carries code.
func wantCode(t *testing.T, what string, err error, code messages.Code) {
	t.Helper()
	if got, ok := messages.CodeOf(err); !ok || got != code {
		t.Errorf("%s: %v; want %s", what, err, code)
	}
}

// Load returns a stored bundle in canonical form, and refuses with the
// reason code that says what is wrong: a bad hash, a missing bundle, bytes
// that are another bundle, bytes that are no bundle at all (verification
// wins over the parse error), a read that fails.
func TestLoad(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	a, b := storetest.Bundle(t, 0), storetest.Bundle(t, 1)
	s := &brokenStore{Store: memstore.New(memstore.Options{})}
	if _, err := store.Save(ctx, s, a); err != nil {
		t.Fatal(err)
	}
	got, err := store.Load(ctx, s, a.Hash())
	if err != nil || got.Hash() != a.Hash() || !bytes.Equal(got.Bytes(), a.Bytes()) {
		t.Fatalf("Load of a stored bundle: %v; want its canonical bytes back", err)
	}

	_, err = store.Load(ctx, s, "not-a-hash")
	wantCode(t, "a malformed hash", err, messages.InvalidFixtureHash)
	_, err = store.Load(ctx, s, b.Hash())
	wantCode(t, "a hash not stored", err, messages.BundleMissing)

	// Bundle b's blob stored under a's hash (a backend that mixed up its
	// files): it reads as a bundle, but not as a.
	other := memstore.New(memstore.Options{})
	if _, err := other.Put(ctx, a.Hash(), b.Blob()); err != nil {
		t.Fatal(err)
	}
	_, err = store.Load(ctx, other, a.Hash())
	wantCode(t, "another bundle's bytes", err, messages.BundleCorrupt)
	if err != nil && !strings.Contains(err.Error(), a.Hash().Short()) {
		t.Errorf("error %q does not name the hash", err)
	}

	// Bytes that are no bundle: the parse fails first, the verification's
	// verdict wins.
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	garbage := enc.EncodeAll([]byte(`{"not":"a bundle"`), nil)
	enc.Close()
	junk := memstore.New(memstore.Options{})
	if _, err := junk.Put(ctx, a.Hash(), bytes.NewReader(garbage)); err != nil {
		t.Fatal(err)
	}
	_, err = store.Load(ctx, junk, a.Hash())
	wantCode(t, "bytes that are no bundle", err, messages.BundleCorrupt)

	// A read that fails half-way is an operational error, not a verdict.
	s.readErr = errDisk
	_, err = store.Load(ctx, s, a.Hash())
	if !errors.Is(err, errDisk) || !strings.Contains(err.Error(), string(a.Hash())) {
		t.Errorf("a failing read: %v; want it wrapped with the hash", err)
	}
	if code, ok := messages.CodeOf(err); ok && code == messages.BundleCorrupt {
		t.Errorf("a failing read reported as %s", code)
	}
}
