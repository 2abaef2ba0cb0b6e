package filestore

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/storetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var epoch = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

// newStore opens a store in a new temp directory.
func newStore(t *testing.T, now func() time.Time) *Store {
	t.Helper()
	s, err := Open(t.Context(), t.TempDir(), Options{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	clock := storetest.NewClock(epoch)
	storetest.Run(t, func(t *testing.T) store.Store { return newStore(t, clock.Now) },
		storetest.WithClock(clock), storetest.WithCorrupt(corrupt), storetest.WithLeaveTempFile(leaveTemp))
}

// TestConformanceRealClock runs the suite on time.Now, as in production.
func TestConformanceRealClock(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return newStore(t, nil) },
		storetest.WithCorrupt(corrupt), storetest.WithLeaveTempFile(leaveTemp))
}

// corrupt flips a byte in the middle of a stored file.
func corrupt(t *testing.T, st store.Store, hash bundle.Hash) {
	t.Helper()
	name := st.(*Store).pathOf(hash)
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x20
	if err := os.WriteFile(name, b, 0o640); err != nil {
		t.Fatal(err)
	}
}

// leaveTemp leaves what a Put interrupted by a crash leaves: a temp file in
// the shard directory holding the first bytes of the blob.
func leaveTemp(t *testing.T, st store.Store, hash bundle.Hash, partial []byte) {
	t.Helper()
	shard := filepath.Dir(st.(*Store).pathOf(hash))
	if err := os.MkdirAll(shard, 0o750); err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(shard, tmpPrefix+hash.Short()+"-*")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(partial); err != nil {
		t.Fatal(err)
	}
}

// tree returns every path under dir, relative and slash-separated, sorted.
func tree(t *testing.T, dir string) []string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p != dir {
			rel, _ := filepath.Rel(dir, p)
			paths = append(paths, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(paths)
	return paths
}

func blobOf(t *testing.T, c *bundle.Canonical) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := c.WriteBlob(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestLayout(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	c := storetest.Bundle(t, 0)
	if _, err := store.Save(t.Context(), s, c); err != nil {
		t.Fatal(err)
	}
	h := string(c.Hash())
	want := []string{h[:2], h[:2] + "/" + h + ".case"}
	if got := tree(t, s.Dir()); !slices.Equal(got, want) {
		t.Fatalf("store tree = %q, want %q (and no temp files)", got, want)
	}
	name := filepath.Join(s.Dir(), h[:2], h+".case")
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(b, blobOf(t, c)) {
		t.Errorf("%s does not hold the bundle's zstd blob", name)
	}
	for _, p := range []string{filepath.Dir(name), name} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if perm := fi.Mode().Perm(); perm&0o007 != 0 {
			t.Errorf("%s has mode %v: bundles hold unredacted data, others must not read them", p, perm)
		}
	}
	if s.Identity() != "file://"+filepath.ToSlash(s.Dir()) {
		t.Errorf("Identity = %q for dir %q", s.Identity(), s.Dir())
	}
}

func TestUpdatedAtIsMtime(t *testing.T) {
	t.Parallel()
	clock := storetest.NewClock(epoch.Add(123456789 * time.Nanosecond))
	s := newStore(t, clock.Now)
	c := storetest.Bundle(t, 1)
	if _, err := store.Save(t.Context(), s, c); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(s.pathOf(c.Hash()))
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Stat(t.Context(), c.Hash())
	if err != nil {
		t.Fatal(err)
	}
	if !info.UpdatedAt.Equal(fi.ModTime()) || info.UpdatedAt.Before(epoch) || info.UpdatedAt.After(epoch.Add(time.Second)) {
		t.Errorf("UpdatedAt %v, mtime %v, want the injected clock's time near %v", info.UpdatedAt, fi.ModTime(), epoch)
	}
}

func TestOpenCreatesDirectory(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "a", "b", "cases")
	s, err := Open(t.Context(), dir+"/", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("Open did not create %s: %v", dir, err)
	}
	if s.Dir() != dir {
		t.Errorf("Dir() = %q, want %q (cleaned)", s.Dir(), dir)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o007 != 0 {
		t.Errorf("new store directory has mode %v: others must not read bundles", perm)
	}
}

func TestOpenRelativeDirectory(t *testing.T) {
	base := t.TempDir()
	t.Chdir(base)
	s, err := Open(t.Context(), "tests/cases", Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	want := filepath.Join(base, "tests", "cases")
	if s.Dir() != want || s.Identity() != store.FileIdentity(want) {
		t.Errorf("Dir %q, Identity %q; want %q", s.Dir(), s.Identity(), want)
	}
	if _, err := os.Stat(want); err != nil {
		t.Errorf("directory not created: %v", err)
	}
}

func TestOpenRefusesAFile(t *testing.T) {
	t.Parallel()
	name := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(name, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(t.Context(), name, Options{}); err == nil {
		s.Close()
		t.Fatal("Open on a regular file succeeded")
	}
}

func TestListIgnoresEverythingButBundles(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	c := storetest.Bundle(t, 2)
	if _, err := store.Save(t.Context(), s, c); err != nil {
		t.Fatal(err)
	}
	h := string(c.Hash())
	other := string(storetest.Bundle(t, 3).Hash())
	wrongShard := "00"
	if h[:2] == wrongShard || other[:2] == wrongShard {
		wrongShard = "ff"
	}
	write := func(rel string) {
		p := filepath.Join(s.Dir(), filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, blobOf(t, c), 0o640); err != nil {
			t.Fatal(err)
		}
	}
	write("README")
	write(h + ".case")                                   // not in a shard
	write("zz/" + h + ".case")                           // not a hex shard
	write(strings.ToUpper(h[:2]) + "/" + h + ".case")    // upper-case shard
	write(wrongShard + "/" + other + ".case")            // in the wrong shard
	write(h[:2] + "/" + strings.ToUpper(h) + ".case")    // upper-case name
	write(h[:2] + "/" + h + ".case.bak")                 // extra suffix
	write(h[:2] + "/" + h[:63] + ".case")                // short name
	write(h[:2] + "/" + tmpPrefix + h[:12] + "-abc")     // a Put's temp file
	write(h[:2] + "/" + delPrefix + h[:12] + "-abc")     // a DeleteBefore's trash
	write(other[:2] + "/" + tmpPrefix + other + ".case") // temp named like a bundle
	if err := os.MkdirAll(filepath.Join(s.Dir(), other[:2], other+".case"), 0o750); err != nil {
		t.Fatal(err) // a directory with a bundle's name
	}

	var got []bundle.Hash
	for info, err := range s.List(t.Context()) {
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, info.Hash)
	}
	if !slices.Equal(got, []bundle.Hash{c.Hash()}) {
		t.Errorf("List = %v, want only %s", got, h)
	}
}

// syncRecorder records the directories a store fsyncs.
type syncRecorder struct {
	mu   sync.Mutex
	dirs []string
	err  error
}

func (r *syncRecorder) sync(dir string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dirs = append(r.dirs, dir)
	return r.err
}

func (r *syncRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := r.dirs
	r.dirs = nil
	return d
}

func TestDirectoryFsync(t *testing.T) {
	t.Parallel()
	clock := storetest.NewClock(epoch)
	s := newStore(t, clock.Now)
	rec := &syncRecorder{}
	s.syncDir = rec.sync
	ctx := t.Context()
	c := storetest.Bundle(t, 0)
	shard := filepath.Dir(s.pathOf(c.Hash()))

	if _, err := store.Save(ctx, s, c); err != nil {
		t.Fatal(err)
	}
	// A new shard: the store directory (new entry) and the shard (new file).
	if got, want := rec.take(), []string{s.Dir(), shard}; !slices.Equal(got, want) {
		t.Errorf("Put into a new shard synced %q, want %q", got, want)
	}
	if _, err := store.Save(ctx, s, c); err != nil {
		t.Fatal(err)
	}
	if got := rec.take(); len(got) != 0 {
		t.Errorf("re-save (a time stamp only) synced %q, want nothing", got)
	}
	if _, err := s.Delete(ctx, c.Hash()); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.take(), []string{shard}; !slices.Equal(got, want) {
		t.Errorf("Delete synced %q, want %q", got, want)
	}
	if _, err := store.Save(ctx, s, c); err != nil {
		t.Fatal(err)
	}
	if got, want := rec.take(), []string{shard}; !slices.Equal(got, want) {
		t.Errorf("Put into an existing shard synced %q, want %q", got, want)
	}
	clock.Advance(2 * time.Hour)
	if ok, err := s.DeleteBefore(ctx, c.Hash(), clock.Now()); err != nil || !ok {
		t.Fatalf("DeleteBefore: %v %v", ok, err)
	}
	if got, want := rec.take(), []string{shard}; !slices.Equal(got, want) {
		t.Errorf("DeleteBefore synced %q, want %q", got, want)
	}

	// A failing fsync fails the Put: the bundle may not be durable.
	rec.err = errors.New("disk on fire")
	_, err := store.Save(ctx, s, c)
	if !errors.Is(err, rec.err) {
		t.Errorf("Save with a failing directory fsync: %v, want it to wrap the fsync error", err)
	}
}

func TestSyncDir(t *testing.T) {
	t.Parallel()
	if err := syncDir(t.TempDir()); err != nil {
		t.Errorf("syncDir of a directory: %v", err)
	}
	if err := syncDir(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("syncDir of a missing directory: %v", err)
	}
}

func TestFailedPutLeavesNoTempFile(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	c := storetest.Bundle(t, 1)
	blob := blobOf(t, c)
	boom := errors.New("boom")
	_, err := s.Put(t.Context(), c.Hash(), &failingReader{data: blob[:10], err: boom})
	if !errors.Is(err, boom) {
		t.Fatalf("Put: %v", err)
	}
	h := string(c.Hash())
	if got, want := tree(t, s.Dir()), []string{h[:2]}; !slices.Equal(got, want) {
		t.Errorf("after a failed Put the store holds %q, want only %q", got, want)
	}
}

type failingReader struct {
	data []byte
	err  error
}

func (r *failingReader) Read(p []byte) (int, error) {
	if len(r.data) == 0 {
		return 0, r.err
	}
	n := copy(p, r.data)
	r.data = r.data[n:]
	return n, nil
}

// TestDeleteBeforeRefreshedDuringCheck re-saves a bundle between
// DeleteBefore's check of its time and its removal: the bundle must stay.
func TestDeleteBeforeRefreshedDuringCheck(t *testing.T) {
	t.Parallel()
	clock := storetest.NewClock(epoch)
	s := newStore(t, clock.Now)
	ctx := t.Context()
	c := storetest.Bundle(t, 0)
	if _, err := store.Save(ctx, s, c); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Hour)
	cutoff := clock.Now() // gc starts
	s.beforeRename = func(string) {
		clock.Advance(time.Hour) // the re-save is later than the gc's start
		created, err := store.Save(ctx, s, c)
		if err != nil || created {
			t.Errorf("re-save: created=%v err=%v, want false, nil", created, err)
		}
	}
	deleted, err := s.DeleteBefore(ctx, c.Hash(), cutoff)
	if err != nil || deleted {
		t.Fatalf("DeleteBefore of a bundle re-saved during it: deleted=%v err=%v, want false, nil", deleted, err)
	}
	h := string(c.Hash())
	if got, want := tree(t, s.Dir()), []string{h[:2], h[:2] + "/" + h + ".case"}; !slices.Equal(got, want) {
		t.Errorf("store tree = %q, want %q", got, want)
	}
	info, err := s.Stat(ctx, c.Hash())
	if err != nil || info.UpdatedAt.Before(cutoff) {
		t.Errorf("Stat after: %+v %v, want updated after %v", info, err, cutoff)
	}
}

// TestPutSweptBetweenLinkAndStamp deletes the bundle right after Put linked
// it (as a gc could): Put must notice and write it again.
func TestPutSweptBetweenLinkAndStamp(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	ctx := t.Context()
	c := storetest.Bundle(t, 1)
	swept := 0
	s.afterLink = func(final string) {
		if swept == 0 {
			swept++
			if err := os.Remove(final); err != nil {
				t.Error(err)
			}
		}
	}
	created, err := store.Save(ctx, s, c)
	if err != nil || !created {
		t.Fatalf("Save: created=%v err=%v, want true, nil", created, err)
	}
	if swept != 1 {
		t.Fatal("the hook did not run")
	}
	rc, err := store.Get(ctx, s, c.Hash())
	if err != nil {
		t.Fatalf("Get after Put: %v", err)
	}
	rc.Close()
}

// TestPutStampLandsOnRemovedFile removes the bundle right after a re-save
// set its time, as a DeleteBefore that renamed and removed it between the
// name lookup and the time change would: Put must see that its stamp is
// not on the stored file, and write the bundle again.
func TestPutStampLandsOnRemovedFile(t *testing.T) {
	t.Parallel()
	s := newStore(t, nil)
	ctx := t.Context()
	c := storetest.Bundle(t, 1)
	if _, err := store.Save(ctx, s, c); err != nil {
		t.Fatal(err)
	}
	removed := false
	s.afterChtimes = func(final string) {
		if !removed {
			removed = true
			if err := os.Remove(final); err != nil {
				t.Error(err)
			}
		}
	}
	created, err := store.Save(ctx, s, c)
	if err != nil || !created {
		t.Fatalf("re-save whose stamp hit a removed file: created=%v err=%v, want true (written again), nil", created, err)
	}
	if !removed {
		t.Fatal("the hook did not run")
	}
	rc, err := store.Get(ctx, s, c.Hash())
	if err != nil {
		t.Fatalf("Get after the re-save: %v", err)
	}
	rc.Close()
}

// TestDeleteBeforeWholeSeconds: a bundle updated in the second of the
// cutoff is kept, whatever the file system's time granularity.
func TestDeleteBeforeWholeSeconds(t *testing.T) {
	t.Parallel()
	clock := storetest.NewClock(epoch.Add(500 * time.Millisecond))
	s := newStore(t, clock.Now)
	ctx := t.Context()
	c := storetest.Bundle(t, 2)
	if _, err := store.Save(ctx, s, c); err != nil {
		t.Fatal(err)
	}
	if deleted, err := s.DeleteBefore(ctx, c.Hash(), epoch.Add(900*time.Millisecond)); err != nil || deleted {
		t.Errorf("DeleteBefore in the same second: deleted=%v err=%v, want false, nil", deleted, err)
	}
	if deleted, err := s.DeleteBefore(ctx, c.Hash(), epoch.Add(time.Second)); err != nil || !deleted {
		t.Errorf("DeleteBefore the next second: deleted=%v err=%v, want true, nil", deleted, err)
	}
}

// TestDeleteBeforeRacingPut runs DeleteBefore and a later Put of the same
// bundle at once, many times: whatever the interleaving, the bundle is
// stored afterwards, and no hidden file is left behind.
func TestDeleteBeforeRacingPut(t *testing.T) {
	t.Parallel()
	clock := storetest.NewClock(epoch)
	s := newStore(t, clock.Now)
	ctx := t.Context()
	c := storetest.Bundle(t, 3)
	blob := blobOf(t, c)
	for i := range 300 {
		if _, err := s.Put(ctx, c.Hash(), bytes.NewReader(blob)); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Hour)
		cutoff := clock.Now()
		clock.Advance(time.Hour)
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := s.DeleteBefore(ctx, c.Hash(), cutoff); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			if _, err := s.Put(ctx, c.Hash(), bytes.NewReader(blob)); err != nil {
				t.Error(err)
			}
		})
		wg.Wait()
		info, err := s.Stat(ctx, c.Hash())
		if err != nil {
			t.Fatalf("iteration %d: a Put after the cutoff was undone: %v", i, err)
		}
		if info.UpdatedAt.Before(cutoff) {
			t.Fatalf("iteration %d: UpdatedAt %v before cutoff %v", i, info.UpdatedAt, cutoff)
		}
	}
	h := string(c.Hash())
	if got, want := tree(t, s.Dir()), []string{h[:2], h[:2] + "/" + h + ".case"}; !slices.Equal(got, want) {
		t.Errorf("store tree = %q, want %q", got, want)
	}
}
