package store_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/filestore"
	"github.com/pyrula/caseworker/store/memstore"
	"github.com/pyrula/caseworker/store/storetest"
)

var errDisk = errors.New("disk on fire")

// brokenStore is a memory store whose Open and Put fail, or whose blobs fail
// half-way through a read.
type brokenStore struct {
	*memstore.Store
	openErr, putErr, readErr error
}

func (b *brokenStore) Open(ctx context.Context, h bundle.Hash) (io.ReadCloser, error) {
	if b.openErr != nil {
		return nil, b.openErr
	}
	rc, err := b.Store.Open(ctx, h)
	if err != nil || b.readErr == nil {
		return rc, err
	}
	return struct {
		io.Reader
		io.Closer
	}{io.MultiReader(io.LimitReader(rc, 8), &errReader{b.readErr}), rc}, nil
}

func (b *brokenStore) Put(ctx context.Context, h bundle.Hash, r io.Reader) (bool, error) {
	if b.putErr != nil {
		return false, b.putErr
	}
	return b.Store.Put(ctx, h, r)
}

type errReader struct{ err error }

func (e *errReader) Read([]byte) (int, error) { return 0, e.err }

func TestGetWrapsErrors(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	c := storetest.Bundle(t, 0)
	s := &brokenStore{Store: memstore.New(memstore.Options{})}
	if _, err := store.Save(ctx, s, c); err != nil {
		t.Fatal(err)
	}

	s.openErr = errDisk
	_, err := store.Get(ctx, s, c.Hash())
	if !errors.Is(err, errDisk) || !strings.Contains(err.Error(), c.Hash().Short()) {
		t.Errorf("Get with a failing Open: %v, want it to wrap the error and name the hash", err)
	}
	if code, ok := messages.CodeOf(err); ok {
		t.Errorf("an operational error got the reason code %s", code)
	}

	s.openErr, s.readErr = nil, errDisk
	rc, err := store.Get(ctx, s, c.Hash())
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.ReadAll(rc)
	rc.Close()
	if !errors.Is(err, errDisk) || !strings.Contains(err.Error(), c.Hash().Short()) {
		t.Errorf("reading a blob that fails: %v, want it to wrap the error and name the hash", err)
	}
	if code, ok := messages.CodeOf(err); ok {
		t.Errorf("an I/O error while reading got the reason code %s", code)
	}
}

func TestGetMissingNamesTheStore(t *testing.T) {
	t.Parallel()
	s, err := filestore.Open(t.Context(), t.TempDir(), filestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	h := storetest.Bundle(t, 1).Hash()
	_, err = store.Get(t.Context(), s, h)
	e := messages.AsError(err)
	if e == nil || e.Code != messages.BundleMissing {
		t.Fatalf("Get of an absent hash: %v, want bundle_missing", err)
	}
	if !strings.Contains(e.Message, string(h)) || !strings.Contains(e.Message, s.Identity()) {
		t.Errorf("bundle_missing message %q does not name the hash and the store", e.Message)
	}
}

func TestSaveWrapsErrors(t *testing.T) {
	t.Parallel()
	c := storetest.Bundle(t, 2)
	s := &brokenStore{Store: memstore.New(memstore.Options{}), putErr: errDisk}
	created, err := store.Save(t.Context(), s, c)
	if created || !errors.Is(err, errDisk) || !strings.Contains(err.Error(), c.Hash().Short()) {
		t.Errorf("Save with a failing Put: %v, %v", created, err)
	}
}

// racingStore is a memory store where, for the hashes in newer, DeleteBefore
// finds the bundle re-saved (it refreshes it and declines), and for those in
// gone, someone else has just deleted it.
type racingStore struct {
	*memstore.Store
	newer, gone map[bundle.Hash]bool
}

func (r *racingStore) DeleteBefore(ctx context.Context, h bundle.Hash, cutoff time.Time) (bool, error) {
	switch {
	case r.newer[h]:
		return false, nil
	case r.gone[h]:
		if _, err := r.Store.Delete(ctx, h); err != nil {
			return false, err
		}
		return false, nil
	}
	return r.Store.DeleteBefore(ctx, h, cutoff)
}

func TestGCRacesReportedAsTheyEnd(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	clock := storetest.NewClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	newer, gone, plain := storetest.Bundle(t, 0), storetest.Bundle(t, 1), storetest.Bundle(t, 2)
	s := &racingStore{
		Store: memstore.New(memstore.Options{Now: clock.Now}),
		newer: map[bundle.Hash]bool{newer.Hash(): true},
		gone:  map[bundle.Hash]bool{gone.Hash(): true},
	}
	for _, c := range []*bundle.Canonical{newer, gone, plain} {
		if _, err := store.Save(ctx, s, c); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(time.Hour)
	got := map[bundle.Hash]string{}
	err := store.GC(ctx, s, store.GCParams{Sweep: true, Now: clock.Now}, func(it store.GCItem) error {
		got[it.Info.Hash] = it.Action
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	want := map[bundle.Hash]string{newer.Hash(): store.ActionSkippedNew, plain.Hash(): store.ActionDeleted}
	if len(got) != len(want) || got[newer.Hash()] != want[newer.Hash()] || got[plain.Hash()] != want[plain.Hash()] {
		t.Errorf("GC reported %v, want %v (a bundle deleted by someone else is not reported)", got, want)
	}
}

func TestCheckBinding(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fs, err := filestore.Open(t.Context(), dir, filestore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fs.Close()
	mem := memstore.New(memstore.Options{})
	defer mem.Close()

	tests := []struct {
		s        store.Store
		expected string
		ok       bool
	}{
		{fs, "", true},
		{fs, fs.Identity(), true},
		{fs, dir, true},
		{fs, dir + "/", true},
		{fs, "file://" + dir + "/", true},
		{fs, "file://localhost" + dir, true},
		{fs, dir + "/other", false},
		{fs, "memory:", false},
		{fs, "postgres://u:topsecret@db/pyrula", false},
		{fs, "s3://bucket/prefix", false},
		{fs, "bogus://x", false},
		{fs, "s3://KEY:topsecret@bucket/prefix", false},
		{mem, "memory:", true},
		{mem, " memory: ", true},
		{mem, dir, false},
	}
	for _, tc := range tests {
		err := store.CheckBinding(tc.s, tc.expected)
		if tc.ok {
			if err != nil {
				t.Errorf("CheckBinding(%s, %q): %v", tc.s.Identity(), tc.expected, err)
			}
			continue
		}
		if code, _ := messages.CodeOf(err); code != messages.BindingMismatch {
			t.Errorf("CheckBinding(%s, %q): %v, want binding_mismatch", tc.s.Identity(), tc.expected, err)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "topsecret") || !strings.Contains(msg, tc.s.Identity()) {
			t.Errorf("CheckBinding(%s, %q): message %q must name the opened store and no credential", tc.s.Identity(), tc.expected, msg)
		}
	}
}
