package bundle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/bundle/bundletest"
	"github.com/pyrula/caseworker/messages"
)

// sameRead fails unless reading in on several goroutines (runs of about
// split bytes) gives exactly what the sequential read gives: the same
// canonical bytes, hash, summary and manifest, or the same error; and so
// does the same parallel read spilled from its first byte to a file of a
// temporary directory (Options.SpillDir), compressing, whose blob holds
// those bytes, and which leaves nothing in that directory.
func sameRead(t *testing.T, in []byte, split int) {
	t.Helper()
	opts := Options{MaxCanonicalSize: 8 << 20, MaxInputSize: 16 << 20, general: true}
	want, wantErr := Read(bytes.NewReader(in), opts)
	par := opts
	par.split = split
	spilled := par
	spilled.SpillDir, spilled.spillAt, spilled.Compress = t.TempDir(), 1, true
	for name, o := range map[string]Options{"parallel": par, "spilled": spilled} {
		got, gotErr := Read(bytes.NewReader(in), o)
		if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
			t.Fatalf("%s, split %d: error %v, sequential error %v", name, split, gotErr, wantErr)
		}
		if gotErr != nil {
			continue
		}
		if !bytes.Equal(got.Bytes(), want.Bytes()) || got.Hash() != want.Hash() || got.Size() != want.Size() ||
			!reflect.DeepEqual(got.Summary(), want.Summary()) || !reflect.DeepEqual(got.Manifest(), want.Manifest()) {
			t.Fatalf("%s, split %d: the read differs from the sequential one", name, split)
		}
		if o.Compress {
			var blob bytes.Buffer
			if err := got.WriteBlob(&blob); err != nil {
				t.Fatal(err)
			}
			if back, err := testDecoder.DecodeAll(blob.Bytes(), nil); err != nil || !bytes.Equal(back, want.Bytes()) {
				t.Fatalf("%s, split %d: the blob does not decompress to the canonical bytes (%v)", name, split, err)
			}
		}
	}
	// The spill is unmapped and its file closed once collected: collect
	// it now, so that a fuzzer's many reads do not pile up open files.
	runtime.GC()
	if left, _ := os.ReadDir(spilled.SpillDir); len(left) > 0 {
		t.Fatalf("split %d: the spill left %d files behind", split, len(left))
	}
}

// TestReadParallel: the parallel read of long arrays agrees with the
// sequential one on valid bundles in every form (compact, indented,
// canonical, results out of order), and on broken ones: a syntax error, an
// invalid string, an element that is not an object, a result that fails
// validation, a duplicate, each early, in the middle and last; and it is
// what Read uses for a large bundle.
func TestReadParallel(t *testing.T) {
	gen := bundletest.Generate(1<<20, 5)
	var indented bytes.Buffer
	if err := json.Indent(&indented, gen, "", "  "); err != nil {
		t.Fatal(err)
	}
	c, err := Read(bytes.NewReader(gen), Options{})
	if err != nil {
		t.Fatal(err)
	}
	valid := map[string][]byte{"generated": gen, "indented": indented.Bytes(), "canonical": c.Bytes()}
	for _, name := range fastGolden {
		b, err := os.ReadFile(filepath.Join("testdata", name+".input.json"))
		if err != nil {
			t.Fatal(err)
		}
		valid[name] = b
	}
	for name, in := range valid {
		t.Run(name, func(t *testing.T) {
			for _, split := range []int{1, 100, 4096, chunkBytes} {
				sameRead(t, in, split)
			}
		})
	}

	// Broken copies of the indented bundle: each change at the first, a
	// middle and the last result and history event.
	text := indented.String()
	breaks := map[string]func(elem string) string{
		"syntax":        func(e string) string { return strings.Replace(e, `":`, `"`, 1) },
		"control":       func(e string) string { return strings.Replace(e, `lorem`, "lo\x01rem", 1) },
		"bad-utf8":      func(e string) string { return strings.Replace(e, `lorem`, "lo\xffrem", 1) },
		"bad-number":    func(e string) string { return strings.Replace(e, `"id": `, `"id": 01`, 1) },
		"not-an-object": func(e string) string { return "[" + e + "]" },
		"no-kind":       func(e string) string { return strings.Replace(e, `"kind"`, `"kinds"`, 1) },
		"duplicate-key": func(e string) string { return strings.Replace(e, `{`, `{"key": "x",`, 1) },
		"deep":          func(e string) string { return strings.Repeat("[", 1001) + e + strings.Repeat("]", 1001) },
		"unclosed":      func(e string) string { return e[:len(e)-1] },
	}
	starts := elementStarts(text)
	if len(starts) < 100 {
		t.Fatalf("found %d elements in the indented bundle", len(starts))
	}
	for name, change := range breaks {
		t.Run(name, func(t *testing.T) {
			for _, at := range []int{0, len(starts) / 3, len(starts) - 2, len(starts) - 1} {
				s, e := starts[at][0], starts[at][1]
				broken := text[:s] + change(text[s:e]) + text[e:]
				for _, split := range []int{1, 777, chunkBytes} {
					sameRead(t, []byte(broken), split)
				}
			}
		})
	}

	// Two results of one kind and key, far apart.
	dup := strings.Replace(text, `"fetch_`, `"fetch_dup`, 1)
	dup = strings.Replace(dup, `"fetch_`, `"fetch_dup`, 1)
	sameRead(t, []byte(dup), 1000)
	_, err = Read(strings.NewReader(dup), Options{split: 1000})
	if messages.AsError(err) == nil {
		t.Fatalf("duplicate results: error %v, want a reason code", err)
	}
}

// elementStarts returns where each element of the results and history
// arrays of an indented bundle begins and ends: the lines that open with
// four spaces and a brace, to the matching closing line.
func elementStarts(text string) [][2]int {
	var out [][2]int
	for i := 0; ; {
		s := strings.Index(text[i:], "\n    {")
		if s < 0 {
			return out
		}
		s += i + 1
		e := strings.Index(text[s:], "\n    }")
		out = append(out, [2]int{s, s + e + len("\n    }")})
		i = s + e
	}
}

// FuzzReadParallel: the parallel read of any input, in tiny runs, gives
// what the sequential read gives (sameRead).
//
//	go test -run '^$' -fuzz FuzzReadParallel -fuzztime 60s ./bundle/
func FuzzReadParallel(f *testing.F) {
	for _, name := range fastGolden {
		for _, form := range []string{".canonical.json", ".input.json"} {
			b, err := os.ReadFile(filepath.Join("testdata", name+form))
			if err != nil {
				f.Fatal(err)
			}
			f.Add(b, uint16(1))
			f.Add(b, uint16(300))
		}
	}
	f.Add([]byte(`{"results":[{"kind":"a","key":"b","fingerprint":"`+strings.Repeat("0", 64)+`","result":1},[1,]],"history":[]}`), uint16(1))
	f.Fuzz(func(t *testing.T, in []byte, split uint16) {
		sameRead(t, in, int(split)+1)
	})
}

// TestSortResults: sortResults puts many results (sorted on two
// goroutines and merged) and few (sorted in line) in (kind, key) order,
// keeping every entry.
func TestSortResults(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 1, 7, asideFrom - 1, asideFrom, 2*asideFrom + 1, 3*asideFrom + 6} {
		r := &reader{}
		for i := range n {
			key := fmt.Sprintf("k%d:%x", rng.IntN(50), rng.Uint32()>>rng.IntN(32))
			f := resultFields{kind: []string{"step", "model", "tool"}[rng.IntN(3)], keyOff: uint32(len(r.keys)), keyLen: uint32(len(key))}
			r.keys = append(r.keys, key...)
			r.results = append(r.results, resultEntry{start: uint32(i), keyOff: f.keyOff, keyLen: f.keyLen, kind: r.kindID(f.kind)})
		}
		if n%2 == 1 {
			// Largest first: the first half's are left when the merge ends.
			slices.SortFunc(r.results, func(a, b resultEntry) int { return r.compareResults(b, a) })
		}
		r.sortResults()
		if len(r.results) != n {
			t.Fatalf("%d results sorted into %d", n, len(r.results))
		}
		seen := make([]bool, n)
		for i, e := range r.results {
			if seen[e.start] {
				t.Fatalf("result %d twice", e.start)
			}
			seen[e.start] = true
			if i > 0 && r.compareResults(r.results[i-1], e) > 0 {
				t.Fatalf("%d results: out of order at %d", n, i)
			}
		}
	}
}

// TestCallsIndexedAside: in a long history (its calls indexed on a second
// goroutine while the results are sorted) a call whose fingerprint is not
// its result's is still refused, naming the event.
func TestCallsIndexedAside(t *testing.T) {
	gen := string(bundletest.Generate(34<<20, 9))
	fp := strings.Repeat("ab", 32)
	last := strings.LastIndex(gen, fp)
	bad := gen[:last] + strings.Repeat("cd", 32) + gen[last+64:]
	good, err := Read(strings.NewReader(gen), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if n := good.Summary().HistoryCount; n < asideFrom {
		t.Fatalf("the history has %d events, fewer than %d", n, asideFrom)
	}
	_, err = Read(strings.NewReader(bad), Options{})
	if messages.AsError(err) == nil || !strings.Contains(err.Error(), "has fingerprint "+strings.Repeat("cd", 32)) {
		t.Fatalf("error %v, want bundle_corrupt naming the call's fingerprint", err)
	}
}

// TestReadParallelCompressing: with the compression pipeline on (a large
// bundle in canonical order, read by the general path), the parallel read
// hands the pipeline the same bytes: its blob decompresses to the
// canonical bytes, under their hash.
func TestReadParallelCompressing(t *testing.T) {
	c, err := Read(bytes.NewReader(bundletest.Generate(6<<20, 11)), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var indented bytes.Buffer
	if err := c.WriteIndented(&indented); err != nil {
		t.Fatal(err)
	}
	for name, in := range map[string][]byte{"canonical": c.Bytes(), "indented": indented.Bytes()} {
		got, err := Read(bytes.NewReader(in), Options{Compress: true, general: true, split: 64 << 10})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got.blob == nil {
			t.Fatalf("%s: the pipeline made no blob", name)
		}
		var blob bytes.Buffer
		if err := got.WriteBlob(&blob); err != nil {
			t.Fatal(err)
		}
		var back bytes.Buffer
		r := NewVerifyingReader(&blob, c.Hash())
		if _, err := back.ReadFrom(r); err != nil || !bytes.Equal(back.Bytes(), c.Bytes()) {
			t.Fatalf("%s: the blob does not hold the canonical bytes (%v)", name, err)
		}
	}
}
