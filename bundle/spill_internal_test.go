package bundle

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/bundle/bundletest"
)

// TestSpillMidway: a read whose size is not known beforehand (a stream)
// moves its bytes to the spill once they pass the threshold, and gives
// what the read in memory gives; a SpillDir that cannot take the file, or
// a tmpfs (whose pages are memory), leaves the bytes in memory, with the
// same result.
func TestSpillMidway(t *testing.T) {
	in, want := indentedBundle(t, 1<<20, 3)
	dirs := map[string]string{"spilled": t.TempDir(), "no such directory": filepath.Join(t.TempDir(), "missing")}
	if runtime.GOOS == "linux" {
		if _, err := os.Stat("/dev/shm"); err == nil {
			dirs["tmpfs"] = "/dev/shm"
		}
	}
	for name, dir := range dirs {
		t.Run(name, func(t *testing.T) {
			stream := io.MultiReader(bytes.NewReader(in)) // no Len: no size hint
			got, err := Read(stream, Options{SpillDir: dir, spillAt: 64 << 10, Compress: true})
			if err != nil {
				t.Fatal(err)
			}
			if spilled := got.spill != nil; spilled != (name == "spilled") {
				t.Fatalf("spilled: %v", spilled)
			}
			var blob bytes.Buffer
			if err := got.WriteBlob(&blob); err != nil {
				t.Fatal(err)
			}
			back, err := testDecoder.DecodeAll(blob.Bytes(), nil)
			if err != nil || !bytes.Equal(back, want.Bytes()) || got.Hash() != want.Hash() {
				t.Fatalf("the spilled read differs from the read in memory (%v)", err)
			}
		})
	}
}

// TestSpillKeepsBytesOutOfHeap: a large bundle read with SpillDir, in each
// form (indented JSON, which the general path reads; canonical JSON and the
// zstd blob, which the fast path reads whole), does not keep its canonical
// bytes in the Go heap: the live heap with the Canonical it returns grew by
// less than a quarter of the canonical size, where a read in memory grows
// it by more than that size.
func TestSpillKeepsBytesOutOfHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("reads a 24 MiB bundle")
	}
	indented, c := indentedBundle(t, 24<<20, 9)
	canonical := c.Bytes()
	c = nil
	forms := map[string][]byte{"indented": indented, "canonical": canonical, "blob": zstdOf(canonical)}
	for name, in := range forms {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			kept := func(opts Options) (size, kept int64, hash Hash, spilled bool) {
				before := liveHeap()
				c, err := Read(bytes.NewReader(in), opts)
				if err != nil {
					t.Fatal(err)
				}
				size, hash, spilled = c.Size(), c.Hash(), c.spill != nil
				after := liveHeap()
				runtime.KeepAlive(c)
				return size, after - before, hash, spilled
			}
			// The live heap is the process's: what another test left
			// running can land in one measurement, so the spilled read
			// counts by its least of three.
			var inSpill int64
			var got Hash
			var spilled bool
			for i := range 3 {
				var n int64
				if _, n, got, spilled = kept(Options{SpillDir: dir, Compress: true}); i == 0 || n < inSpill {
					inSpill = n
				}
			}
			size, inHeap, want, _ := kept(Options{})
			if !spilled || got != want {
				t.Fatalf("spilled %v, hash %s, want %s", spilled, got, want)
			}
			if inHeap < size || inSpill > size/4 {
				t.Fatalf("canonical %d bytes: a Canonical keeps %d bytes of heap in memory, %d spilled", size, inHeap, inSpill)
			}
			runtime.GC() // the spill's cleanup unmaps it; its file was unlinked at once
			if left, _ := os.ReadDir(dir); len(left) > 0 {
				t.Fatalf("the spill left %d files behind", len(left))
			}
		})
	}
	runtime.KeepAlive(forms) // their bytes stay out of the figures
}

// liveHeap collects garbage and returns the bytes of the heap's live
// objects it marked. It collects twice: what sync.Pools hold (the zstd
// encoder's buffers) survives one collection.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC()
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	return int64(sample[0].Value.Uint64())
}

// indentedBundle returns a generated bundle of about size bytes, indented,
// and its read in memory.
func indentedBundle(t *testing.T, size int, seed uint64) ([]byte, *Canonical) {
	t.Helper()
	var in bytes.Buffer
	if err := json.Indent(&in, bundletest.Generate(size, seed), "", "  "); err != nil {
		t.Fatal(err)
	}
	c, err := Read(bytes.NewReader(in.Bytes()), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return in.Bytes(), c
}

// TestSortInFile: a spilled bundle whose results come out of order, small
// ones, ones longer than a bucket's buffer and one longer than a bucket,
// over several buckets, is hashed and compressed to the bytes of the read
// in memory, whether its file has room for the buckets or not (a limit at
// its size: one pread per result).
func TestSortInFile(t *testing.T) {
	var b bytes.Buffer
	b.WriteString(`{"results":[`)
	sizes := []int{5 << 20}
	for i := range 300 {
		sizes = append(sizes, 100+i%7*13, 40<<10+i)
	}
	for i, n := range sizes {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"kind":"step","key":"k%05d","fingerprint":"`+strings.Repeat("ab", 32)+`","result":"%s"}`, len(sizes)-i, strings.Repeat("x", n))
	}
	b.WriteString(`],"history":[],"manifest":{"format":1,"kind":"workflow","target_name":"t","code_version":"v1","registration":{"tools":[],"steps":[]},"recorded_config":{},"pyrula_version":"0.1.0","source":{"run_id":"r","namespace":"n","origin":"valkey"},"fork_after_seq":0,"capture":{"complete":true,"missing":[]},"inputs":{}}}`)
	in := b.Bytes()
	want, err := Read(bytes.NewReader(in), Options{general: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int64{0, want.Size()} {
		got, err := Read(bytes.NewReader(in), Options{general: true, Compress: true, SpillDir: t.TempDir(), spillAt: 1, MaxCanonicalSize: limit})
		if err != nil {
			t.Fatal(err)
		}
		if got.spill == nil || got.region != nil {
			t.Fatalf("limit %d: not spilled out of order", limit)
		}
		var blob bytes.Buffer
		if err := got.WriteBlob(&blob); err != nil {
			t.Fatal(err)
		}
		back, err := testDecoder.DecodeAll(blob.Bytes(), nil)
		if got.Hash() != want.Hash() || err != nil || !bytes.Equal(back, want.Bytes()) {
			t.Fatalf("limit %d: hash %s, blob %d bytes (%v); want %s, %d bytes", limit, got.Hash(), len(back), err, want.Hash(), want.Size())
		}
		// The buckets are used when the file has room for them.
		var sorted bytes.Buffer
		var ioErr error
		used := got.sortInFile(func(b []byte) { sorted.Write(b) }, &ioErr)
		if used != (limit == 0) || ioErr != nil {
			t.Fatalf("limit %d: sortInFile used the buckets: %t (%v)", limit, used, ioErr)
		}
		if used && !bytes.Contains(want.Bytes(), sorted.Bytes()) || sorted.Len() < 12<<20 && used {
			t.Fatalf("limit %d: the buckets gave %d bytes that are not the sorted results", limit, sorted.Len())
		}
	}
}

// TestRelease: Release closes a spilled bundle's file at once (its
// reserved blocks go with it), after the hash and blob made aside, and
// does nothing the second time or for a bundle held in memory.
func TestRelease(t *testing.T) {
	in, want := indentedBundle(t, 2<<20, 3)
	c, err := Read(bytes.NewReader(in), Options{Compress: true, SpillDir: t.TempDir(), spillAt: 1})
	if err != nil {
		t.Fatal(err)
	}
	if c.spill == nil {
		t.Skip("not spilled here (no fallocate, or a tmpfs)")
	}
	closed := func() bool {
		_, err := c.spill.f.Stat()
		return errors.Is(err, os.ErrClosed)
	}
	if closed() {
		t.Fatal("the spill's file is closed before Release")
	}
	var blob bytes.Buffer
	if err := c.WriteBlob(&blob); err != nil {
		t.Fatal(err)
	}
	hash := c.Hash()
	c.Release()
	if !closed() {
		t.Fatal("the spill's file is open after Release")
	}
	c.Release()
	if back, err := testDecoder.DecodeAll(blob.Bytes(), nil); hash != want.Hash() || err != nil || !bytes.Equal(back, want.Bytes()) {
		t.Fatal("the spilled read gave another hash or blob")
	}
	want.Release() // in memory: nothing to release
}

// TestPopulateAhead: a spill maps the pages ahead of its writer writable
// before the writer reaches them, up to its end, and what is written there
// is in the file.
func TestPopulateAhead(t *testing.T) {
	const size = 16 << 20
	s, err := openSpill(t.TempDir(), size)
	if err != nil {
		t.Skip("no spill here:", err)
	}
	defer s.mapping.release()
	for n := 0; n <= size; n += 1 << 20 {
		copy(s.mem[max(n-1<<20, 0):n], bytes.Repeat([]byte{byte(n >> 20)}, 1<<20))
		s.wrote(n)
		p := s.populated.Load()
		if p < 0 {
			t.Skip("this kernel cannot populate a mapping (before Linux 5.14)")
		}
		if want := min(int64(n)+populateAhead/2, size); p < want {
			t.Fatalf("after %d bytes written the pages are mapped to %d, want at least %d", n, p, want)
		}
	}
	back := make([]byte, 1<<20)
	if _, err := s.f.ReadAt(back, size-1<<20); err != nil || !bytes.Equal(back, bytes.Repeat([]byte{16}, 1<<20)) {
		t.Fatalf("the file's last MiB is not what was written (%v)", err)
	}
}
