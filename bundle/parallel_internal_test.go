package bundle

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/bundle/bundletest"
	"github.com/pyrula/caseworker/messages"
)

// sameRead fails unless reading in on several goroutines (runs of about
// split bytes) gives exactly what the sequential read gives: the same
// canonical bytes, hash, summary and manifest, or the same error.
func sameRead(t *testing.T, in []byte, split int) {
	t.Helper()
	opts := Options{MaxCanonicalSize: 8 << 20, MaxInputSize: 16 << 20, general: true}
	par := opts
	par.split = split
	want, wantErr := Read(bytes.NewReader(in), opts)
	got, gotErr := Read(bytes.NewReader(in), par)
	if (gotErr == nil) != (wantErr == nil) || gotErr != nil && gotErr.Error() != wantErr.Error() {
		t.Fatalf("split %d: error %v, sequential error %v", split, gotErr, wantErr)
	}
	if gotErr != nil {
		return
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) || got.Hash() != want.Hash() || got.Size() != want.Size() ||
		!reflect.DeepEqual(got.Summary(), want.Summary()) || !reflect.DeepEqual(got.Manifest(), want.Manifest()) {
		t.Fatalf("split %d: the read differs from the sequential one", split)
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
