package canonjson_test

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"unicode/utf8"

	"github.com/pyrula/caseworker/canonjson"
)

// -update regenerates testdata/vectors.jsonl with python3 before the golden
// test reads it. Without it the tests never need python.
var update = flag.Bool("update", false, "regenerate testdata/vectors.jsonl with python3 testdata/gen_vectors.py")

const vectorsFile = "testdata/vectors.jsonl"

// vector is one line of testdata/vectors.jsonl, written by
// testdata/gen_vectors.py from Python's json module.
type vector struct {
	Name      string `json:"name"`
	Input     string `json:"input"`
	Canonical string `json:"canonical"`
	SHA256    string `json:"sha256"`
}

var (
	vectorsOnce sync.Once
	vectorsList []vector
	vectorsErr  error
)

// loadVectors reads the golden vectors once per test binary.
func loadVectors(tb testing.TB) []vector {
	tb.Helper()
	vectorsOnce.Do(func() {
		if *update {
			cmd := exec.Command("python3", filepath.Join("testdata", "gen_vectors.py"))
			cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
			if err := cmd.Run(); err != nil {
				vectorsErr = err
				return
			}
		}
		vectorsList, vectorsErr = readVectors(vectorsFile)
	})
	if vectorsErr != nil {
		tb.Fatalf("golden vectors: %v", vectorsErr)
	}
	return vectorsList
}

func readVectors(path string) ([]vector, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []vector
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	line := 0
	for sc.Scan() {
		line++
		raw := sc.Bytes()
		if len(bytes.TrimSpace(raw)) == 0 {
			continue
		}
		var v vector
		if err := json.Unmarshal(raw, &v); err != nil {
			return nil, &lineError{line, err}
		}
		out = append(out, v)
	}
	return out, sc.Err()
}

type lineError struct {
	line int
	err  error
}

func (e *lineError) Error() string { return vectorsFile + ":" + itoa(e.line) + ": " + e.err.Error() }
func (e *lineError) Unwrap() error { return e.err }

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// The vectors file itself must be sane, so that a failure below is about
// the implementation, not about a damaged file.
func TestGoldenVectorsFile(t *testing.T) {
	vs := loadVectors(t)
	if len(vs) < 500 {
		t.Fatalf("only %d golden vectors; expected the full set (rerun python3 testdata/gen_vectors.py)", len(vs))
	}
	raw, err := os.ReadFile(vectorsFile)
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range raw {
		if c >= 0x80 {
			t.Fatalf("%s: non-ASCII byte 0x%02x at offset %d: the file must be written with ensure_ascii=True", vectorsFile, c, i)
		}
	}
	names := map[string]bool{}
	for _, v := range vs {
		if v.Name == "" || names[v.Name] {
			t.Errorf("empty or duplicate vector name %q", v.Name)
		}
		names[v.Name] = true
		// (The generator refuses lone surrogates, which encoding/json would
		// silently turn into U+FFFD.)
		if !utf8.ValidString(v.Input) || !utf8.ValidString(v.Canonical) {
			t.Errorf("%s: invalid UTF-8 after decoding", v.Name)
		}
		sum := sha256.Sum256([]byte(v.Canonical))
		if got := hex.EncodeToString(sum[:]); got != v.SHA256 {
			t.Errorf("%s: sha256 of the canonical text in the file is %s, file says %s", v.Name, got, v.SHA256)
		}
	}
	// Names the brief requires to be present.
	for _, want := range []string{
		"str/astral_escaped_pair", "str/u2028_raw", "str/u2029_escaped", "str/html_raw",
		"str/control_00_lower", "str/control_1f_upper", "str/del_raw", "str/del_escaped",
		"str/solidus_escaped", "int/2p64_plus1", "int/neg_zero", "int/digits_4300",
		"int/digits_4300_neg", "float/1e-05", "float/1e+16", "float/100.0",
		"float/neg_zero_float", "float/0.1", "float/5e-324", "float/max_double",
		"float/underflow", "keys/code_point_order", "container/array_of_empty_object",
		"ws/everywhere", "deep/array_500", "bundle/like", "random/000", "random/299",
	} {
		if !names[want] {
			t.Errorf("vector %q missing", want)
		}
	}
}

func TestGolden(t *testing.T) {
	for _, v := range loadVectors(t) {
		t.Run(v.Name, func(t *testing.T) {
			in := []byte(v.Input)
			inCopy := bytes.Clone(in)
			got, err := canonjson.Canonicalize(in)
			if err != nil {
				t.Fatalf("Canonicalize failed: %v\ninput:    %s\nexpected: %s", err, clip(v.Input), clip(v.Canonical))
			}
			if !bytes.Equal(in, inCopy) {
				t.Errorf("Canonicalize modified its input")
			}
			if !bytes.Equal(got, []byte(v.Canonical)) {
				off := firstDiff(got, []byte(v.Canonical))
				t.Fatalf("canonical bytes differ from Python's at offset %d\ninput:    %s\nexpected: %s\ngot:      %s\nexpected near diff: %q\ngot near diff:      %q",
					off, clip(v.Input), clip(v.Canonical), clip(string(got)),
					around(v.Canonical, off), around(string(got), off))
			}
			sum := sha256.Sum256(got)
			if h := hex.EncodeToString(sum[:]); h != v.SHA256 {
				t.Fatalf("sha256 %s, Python's %s", h, v.SHA256)
			}
			again, err := canonjson.Canonicalize(got)
			if err != nil {
				t.Fatalf("canonicalising the canonical output failed: %v", err)
			}
			if !bytes.Equal(again, got) {
				t.Fatalf("not a fixed point\nonce:  %s\ntwice: %s", clip(string(got)), clip(string(again)))
			}
		})
	}
}

// Append must append to dst and leave the prefix alone, with or without
// spare capacity.
func TestAppendKeepsPrefix(t *testing.T) {
	vs := loadVectors(t)
	for _, name := range []string{"bundle/like", "keys/code_point_order", "float/array", "scalar/int"} {
		var v *vector
		for i := range vs {
			if vs[i].Name == name {
				v = &vs[i]
			}
		}
		if v == nil {
			t.Fatalf("vector %q missing", name)
		}
		for _, dst := range [][]byte{
			[]byte("prefix:"),
			append(make([]byte, 0, 4096), "prefix:"...),
		} {
			out, err := canonjson.Append(dst, []byte(v.Input))
			if err != nil {
				t.Fatalf("%s: Append: %v", name, err)
			}
			if want := "prefix:" + v.Canonical; string(out) != want {
				t.Fatalf("%s: Append(prefix) = %s, want %s", name, clip(string(out)), clip(want))
			}
		}
		out, err := canonjson.Append(nil, []byte(v.Input))
		if err != nil || string(out) != v.Canonical {
			t.Fatalf("%s: Append(nil) = %s, %v", name, clip(string(out)), err)
		}
	}
}

// Canonicalize must be safe for concurrent use (run with -race).
func TestConcurrent(t *testing.T) {
	vs := loadVectors(t)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g; i < len(vs); i += 8 {
				got, err := canonjson.Canonicalize([]byte(vs[i].Input))
				if err != nil || string(got) != vs[i].Canonical {
					t.Errorf("%s: concurrent Canonicalize differs (err %v)", vs[i].Name, err)
				}
			}
		}(g)
	}
	wg.Wait()
}

func firstDiff(a, b []byte) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

func around(s string, off int) string {
	lo := max(0, off-40)
	hi := min(len(s), off+40)
	if lo > len(s) {
		return ""
	}
	return s[lo:hi]
}

func clip(s string) string {
	const n = 300
	if len(s) <= n {
		return s
	}
	return s[:n] + "…(" + itoa(len(s)) + " bytes)"
}
