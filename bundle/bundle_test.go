package bundle_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/messages"
)

var goldenCases = []string{"workflow", "inputs_only", "agent", "post_fork"}

func readFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mustRead(t *testing.T, b []byte) *bundle.Canonical {
	t.Helper()
	c, err := bundle.Read(bytes.NewReader(b), bundle.Options{})
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return c
}

func wantCode(t *testing.T, err error, code messages.Code) {
	t.Helper()
	got, ok := messages.CodeOf(err)
	if !ok || got != code {
		t.Fatalf("error = %v, want code %s", err, code)
	}
}

// TestGoldenBundles checks bundles against the bytes, hash and indented
// form that Python's json module produced (testdata/gen_bundles.py).
func TestGoldenBundles(t *testing.T) {
	for _, name := range goldenCases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			wantCanon := readFile(t, name+".canonical.json")
			wantHash := strings.TrimSpace(string(readFile(t, name+".sha256")))
			wantIndented := readFile(t, name+".indented.json")

			c := mustRead(t, readFile(t, name+".input.json"))
			if got := c.Bytes(); !bytes.Equal(got, wantCanon) {
				t.Fatalf("canonical bytes differ from Python's:\n got %s\nwant %s", got, wantCanon)
			}
			if string(c.Hash()) != wantHash {
				t.Fatalf("hash = %s, want %s", c.Hash(), wantHash)
			}
			if c.Size() != int64(len(wantCanon)) {
				t.Fatalf("size = %d, want %d", c.Size(), len(wantCanon))
			}
			var ind bytes.Buffer
			if err := c.WriteIndented(&ind); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(ind.Bytes(), wantIndented) {
				t.Fatalf("indented form differs from Python's indent=2:\n got %s\nwant %s", ind.Bytes(), wantIndented)
			}
			// Every form reads back to the same hash.
			for form, b := range map[string][]byte{
				"canonical": wantCanon,
				"indented":  ind.Bytes(),
				"zstd":      blobOf(t, c),
				"gzip":      gzipOf(t, wantCanon),
				"bom":       append([]byte("\xef\xbb\xbf"), wantCanon...),
			} {
				if got := mustRead(t, b).Hash(); string(got) != wantHash {
					t.Errorf("%s form: hash %s, want %s", form, got, wantHash)
				}
			}
		})
	}
}

func blobOf(t *testing.T, c *bundle.Canonical) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := c.WriteBlob(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gzipOf(t *testing.T, b []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestSummary(t *testing.T) {
	t.Parallel()
	c := mustRead(t, readFile(t, "workflow.input.json"))
	s := c.Summary()
	if s.Format != 1 || s.Kind != bundle.KindWorkflow || s.TargetName != "checkout" ||
		s.ForkAfterSeq == nil || *s.ForkAfterSeq != 4 || !s.Capture.Complete ||
		s.ResultCount != 7 || s.HistoryCount != 4 {
		t.Fatalf("summary = %+v", s)
	}
	if got := string(c.Manifest().Inputs); !strings.Contains(got, `"sku":"SKU-42"`) {
		t.Fatalf("inputs = %s", got)
	}
	agent := mustRead(t, readFile(t, "agent.input.json")).Manifest()
	if agent.Kind != bundle.KindAgent || len(agent.Registration.Tools) != 2 || !agent.Registration.Tools[1].Writes {
		t.Fatalf("agent manifest = %+v", agent)
	}
}

func TestEncodeMatchesRead(t *testing.T) {
	t.Parallel()
	c := mustRead(t, readFile(t, "workflow.input.json"))
	b, err := c.Decode()
	if err != nil {
		t.Fatal(err)
	}
	again, err := bundle.Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	if again.Hash() != c.Hash() {
		t.Fatalf("Encode(Decode(x)) hash %s, want %s", again.Hash(), c.Hash())
	}
}

func TestVerifyingReader(t *testing.T) {
	t.Parallel()
	c := mustRead(t, readFile(t, "workflow.input.json"))
	blob := blobOf(t, c)

	r := bundle.NewVerifyingReader(bytes.NewReader(blob), c.Hash())
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, c.Bytes()) {
		t.Fatal("verified bytes differ from canonical bytes")
	}

	// A blob of other content under this name.
	other := blobOf(t, mustRead(t, readFile(t, "agent.input.json")))
	wantCode(t, bundle.Verify(bytes.NewReader(other), c.Hash()), messages.BundleCorrupt)

	// A flipped byte anywhere in the frame: corrupt, never a panic, never success.
	for _, i := range []int{0, 5, len(blob) / 2, len(blob) - 1} {
		bad := bytes.Clone(blob)
		bad[i] ^= 0x40
		wantCode(t, bundle.Verify(bytes.NewReader(bad), c.Hash()), messages.BundleCorrupt)
	}
	// Truncated, empty, not zstd at all.
	wantCode(t, bundle.Verify(bytes.NewReader(blob[:len(blob)/2]), c.Hash()), messages.BundleCorrupt)
	wantCode(t, bundle.Verify(bytes.NewReader(nil), c.Hash()), messages.BundleCorrupt)
	wantCode(t, bundle.Verify(bytes.NewReader(c.Bytes()), c.Hash()), messages.BundleCorrupt)
}

// TestVerifyingReaderWriteTo: io.Copy goes through WriteTo, which writes
// the same bytes as Read, passes the writer's error through unchanged and
// still refuses a blob of other content.
func TestVerifyingReaderWriteTo(t *testing.T) {
	t.Parallel()
	c := mustRead(t, readFile(t, "workflow.input.json"))
	blob := blobOf(t, c)
	var out bytes.Buffer
	n, err := io.Copy(&out, bundle.NewVerifyingReader(bytes.NewReader(blob), c.Hash()))
	if err != nil || n != c.Size() || !bytes.Equal(out.Bytes(), c.Bytes()) {
		t.Fatalf("io.Copy: %d bytes, %v; same bytes: %v", n, err, bytes.Equal(out.Bytes(), c.Bytes()))
	}
	full := errors.New("disk full")
	_, err = io.Copy(failingWriter{full}, bundle.NewVerifyingReader(bytes.NewReader(blob), c.Hash()))
	if !errors.Is(err, full) {
		t.Fatalf("writer error = %v, want %v", err, full)
	}
	other := blobOf(t, mustRead(t, readFile(t, "agent.input.json")))
	_, err = io.Copy(io.Discard, bundle.NewVerifyingReader(bytes.NewReader(other), c.Hash()))
	wantCode(t, err, messages.BundleCorrupt)
}

type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

// TestVerifyingReaderBounded: a stored blob that decompresses past the
// limit is refused without decompressing it all.
func TestVerifyingReaderBounded(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	enc, _ := zstd.NewWriter(&buf)
	zero := make([]byte, 1<<20)
	for range (bundle.MaxCanonicalSize >> 20) + 1 {
		enc.Write(zero)
	}
	enc.Close()
	wantCode(t, bundle.Verify(bytes.NewReader(buf.Bytes()), bundle.HashBytes(nil)), messages.BundleCorrupt)
}

type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("disk on fire") }

func TestReadErrorsAreNotCorruption(t *testing.T) {
	t.Parallel()
	_, err := bundle.Read(failingReader{}, bundle.Options{})
	if err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("err = %v", err)
	}
	if code, ok := messages.CodeOf(err); ok {
		t.Fatalf("an I/O error got code %s", code)
	}
	c := mustRead(t, readFile(t, "workflow.input.json"))
	err = bundle.Verify(io.MultiReader(bytes.NewReader(blobOf(t, c)[:10]), failingReader{}), c.Hash())
	if code, ok := messages.CodeOf(err); ok || err == nil {
		t.Fatalf("an I/O error while verifying = %v (code %s)", err, code)
	}
}

func TestTooLarge(t *testing.T) {
	t.Parallel()
	in := readFile(t, "workflow.input.json")
	c := mustRead(t, in)
	_, err := bundle.Read(bytes.NewReader(in), bundle.Options{MaxCanonicalSize: c.Size() - 1})
	wantCode(t, err, messages.BundleTooLarge)
	if _, err := bundle.Read(bytes.NewReader(in), bundle.Options{MaxCanonicalSize: c.Size()}); err != nil {
		t.Fatalf("exactly at the limit: %v", err)
	}
	_, err = bundle.Read(bytes.NewReader(in), bundle.Options{MaxInputSize: int64(len(in)) - 1})
	wantCode(t, err, messages.BundleTooLarge)

	// A zstd bomb: a small frame whose content is over the input limit.
	var buf bytes.Buffer
	enc, _ := zstd.NewWriter(&buf)
	enc.Write([]byte(`{"manifest":"`))
	enc.Write(bytes.Repeat([]byte("a"), 4<<20))
	enc.Close()
	_, err = bundle.Read(bytes.NewReader(buf.Bytes()), bundle.Options{MaxInputSize: 1 << 20})
	wantCode(t, err, messages.BundleTooLarge)
}

// TestValidation covers the refusals of docs/bundle-format.md: unreadable format or
// kind is format_unsupported, anything else malformed is bundle_corrupt.
func TestValidation(t *testing.T) {
	base := string(readFile(t, "workflow.canonical.json"))
	edit := func(old, new string) string {
		if !strings.Contains(base, old) {
			t.Fatalf("fixture has no %q", old)
		}
		return strings.Replace(base, old, new, 1)
	}
	cases := []struct {
		name, in string
		code     messages.Code
	}{
		{"format 2", edit(`"format":1`, `"format":2`), messages.FormatUnsupported},
		{"format string", edit(`"format":1`, `"format":"1"`), messages.FormatUnsupported},
		{"format float", edit(`"format":1`, `"format":1.0`), messages.FormatUnsupported},
		{"no format", edit(`"format":1,`, ``), messages.FormatUnsupported},
		{"kind robot", edit(`"kind":"workflow"`, `"kind":"robot"`), messages.FormatUnsupported},
		{"not json", `{"manifest":`, messages.BundleCorrupt},
		{"garbage", "\x00\x01hello", messages.BundleCorrupt},
		{"empty", ``, messages.BundleCorrupt},
		{"array", `[]`, messages.BundleCorrupt},
		{"extra top key", edit(`{"history"`, `{"extra":1,"history"`), messages.BundleCorrupt},
		{"duplicate top key", edit(`{"history":[`, `{"results":[],"history":[`), messages.BundleCorrupt},
		{"missing results", strings.Split(base, `,"results":`)[0] + "}", messages.BundleCorrupt},
		{"no target", edit(`,"target_name":"checkout"`, ``), messages.BundleCorrupt},
		{"target number", edit(`"target_name":"checkout"`, `"target_name":7`), messages.BundleCorrupt},
		{"inputs array", edit(`"inputs":{`, `"inputs":[{`), messages.BundleCorrupt},
		{"fork string", edit(`"fork_after_seq":4`, `"fork_after_seq":"4"`), messages.BundleCorrupt},
		{"history beyond fork", edit(`"fork_after_seq":4`, `"fork_after_seq":3`), messages.BundleCorrupt},
		{"history out of order", edit(`"run_seq":2`, `"run_seq":7`), messages.BundleCorrupt},
		{"history terminal", edit(`"kind":"call:done","run_seq":4`, `"kind":"run:complete","run_seq":4`), messages.BundleCorrupt},
		{"history not object", edit(`{"history":[`, `{"history":[1,`), messages.BundleCorrupt},
		{"result both", edit(`"result":null`, `"result":null,"error":null`), messages.BundleCorrupt},
		{"result neither", edit(`,"result":null`, ``), messages.BundleCorrupt},
		{"bad fingerprint", edit(`"fingerprint":"0000000000000000000000000000000000000000000000000000000000000001","key":"1"`, `"fingerprint":"X000000000000000000000000000000000000000000000000000000000000001","key":"1"`), messages.BundleCorrupt},
		{"duplicate result", edit(`"key":"9"`, `"key":"10"`), messages.BundleCorrupt},
		{"duplicate json key", edit(`"sku":"SKU-42"`, `"sku":"SKU-42","sku":"x"`), messages.BundleCorrupt},
		{"invalid utf8", edit(`SKU-42`, "SKU-\xff"), messages.BundleCorrupt},
		{"nan", edit(`"result":0.1`, `"result":NaN`), messages.BundleCorrupt},
		{"trailing", base + `{}`, messages.BundleCorrupt},
		{"capture missing not array", edit(`"missing":[]`, `"missing":{}`), messages.BundleCorrupt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := bundle.Read(strings.NewReader(tc.in), bundle.Options{})
			wantCode(t, err, tc.code)
		})
	}
}

func TestParseHash(t *testing.T) {
	t.Parallel()
	good := strings.Repeat("ab", 32)
	if h, err := bundle.ParseHash(good); err != nil || string(h) != good {
		t.Fatalf("ParseHash(good) = %q, %v", h, err)
	}
	for _, bad := range []string{"", "abc", strings.ToUpper(good), good + "0", good[:63] + "g", " " + good[1:]} {
		_, err := bundle.ParseHash(bad)
		wantCode(t, err, messages.InvalidFixtureHash)
	}
}

// TestCompressWhileReading: with Options.Compress, Read makes the blob too,
// on a second goroutine when the input is in canonical order, after the read
// when it is not. Both give the same hash and a blob that verifies.
func TestCompressWhileReading(t *testing.T) {
	t.Parallel()
	unsorted := genBundle(6 << 20)
	plain := mustRead(t, unsorted)
	canonical := plain.Bytes()
	indented := func() []byte {
		var b bytes.Buffer
		plain.WriteIndented(&b)
		return b.Bytes()
	}()
	for name, in := range map[string][]byte{"unsorted": unsorted, "canonical": canonical, "indented": indented} {
		c, err := bundle.Read(bytes.NewReader(in), bundle.Options{Compress: true})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.Hash() != plain.Hash() || c.Size() != plain.Size() {
			t.Fatalf("%s: hash %s size %d, want %s %d", name, c.Hash(), c.Size(), plain.Hash(), plain.Size())
		}
		var blob bytes.Buffer
		if err := c.WriteBlob(&blob); err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(bundle.NewVerifyingReader(bytes.NewReader(blob.Bytes()), c.Hash()))
		if err != nil {
			t.Fatalf("%s: blob does not verify: %v", name, err)
		}
		if !bytes.Equal(got, canonical) {
			t.Fatalf("%s: blob holds other bytes", name)
		}
	}
	// A canonical-order input that turns out invalid at the end stops the
	// pipeline and reports the problem.
	bad := bytes.Replace(canonical, []byte(`"format":1`), []byte(`"format":9`), 1)
	_, err := bundle.Read(bytes.NewReader(bad), bundle.Options{Compress: true})
	wantCode(t, err, messages.FormatUnsupported)
	_, err = bundle.Read(bytes.NewReader(canonical[:len(canonical)-10]), bundle.Options{Compress: true})
	wantCode(t, err, messages.BundleCorrupt)
}

// TestCallsMatchResults: a history call (call:start or call:done) whose
// result of the same kind:key has another fingerprint, or a call:done
// without a result, is bundle_corrupt naming the call, in every form Read
// accepts; a call:start without a result is allowed.
func TestCallsMatchResults(t *testing.T) {
	base := string(readFile(t, "workflow.canonical.json"))
	const (
		fp1   = `"fingerprint":"0000000000000000000000000000000000000000000000000000000000000001"`
		fp2   = `"fingerprint":"00000000000000000000000000000000000000000000000000000000000000ff"`
		call  = `"call":{"effect":"read",` + fp1 + `,"key":"quote:0","kind":"step"}`
		start = call + `,"input":{"sku":"SKU-42"},"kind":"call:start"`
		done  = call + `,"kind":"call:done"`
	)
	edit := func(in string, edits ...string) string {
		for i := 0; i < len(edits); i += 2 {
			if strings.Count(in, edits[i]) != 1 {
				t.Fatalf("want %q once in the fixture", edits[i])
			}
			in = strings.Replace(in, edits[i], edits[i+1], 1)
		}
		return in
	}
	result := fp1 + `,"key":"quote:0","kind":"step","result":`
	cases := []struct {
		name, in string
		msg      string // "" when the bundle is valid
	}{
		{"consistent", base, ""},
		{"done fingerprint differs", edit(base, done, strings.Replace(done, fp1, fp2, 1)),
			"history[3] (run_seq 4): call:done of step:quote:0 has fingerprint 00000000000000000000000000000000000000000000000000000000000000ff, but its result has 0000000000000000000000000000000000000000000000000000000000000001"},
		{"start fingerprint differs", edit(base, start, strings.Replace(start, fp1, fp2, 1)),
			"history[2] (run_seq 3): call:start of step:quote:0 has fingerprint"},
		{"result fingerprint differs", edit(base, result, strings.Replace(result, fp1, fp2, 1)),
			"history[2] (run_seq 3): call:start of step:quote:0 has fingerprint 0000000000000000000000000000000000000000000000000000000000000001, but its result has 00000000000000000000000000000000000000000000000000000000000000ff"},
		{"done without result", edit(base, result, strings.Replace(result, "quote:0", "quote:1", 1)),
			"history[3] (run_seq 4): call:done of step:quote:0 has no recorded result"},
		{"done of another kind", edit(base, done, strings.Replace(done, `"kind":"step"`, `"kind":"now"`, 1)),
			"call:done of now:quote:0 has no recorded result"},
		{"start without result", edit(base, start, strings.Replace(start, "quote:0", "quote:7", 1)), ""},
		{"no results at all", strings.Split(base, `,"results":`)[0] + `,"results":[]}`,
			"call:done of step:quote:0 has no recorded result"},
		{"done without call", edit(base, done, `"kind":"call:done"`),
			"history[3] (run_seq 4): call:done has no call object"},
		{"call not an object", edit(base, done, `"call":"step:quote:0","kind":"call:done"`),
			"call:done has no call object"},
		{"call fingerprint a number", edit(base, done, strings.Replace(done, fp1, `"fingerprint":1`, 1)),
			"call:done has no call object"},
		{"call without key", edit(base, start, strings.Replace(start, `,"key":"quote:0"`, ``, 1)),
			"history[2] (run_seq 3): call:start has no call object"},
		{"escaped key", edit(base, done, strings.Replace(done, `"key":"quote:0"`, `"key":"quote\"0"`, 1)),
			`call:done of step:quote"0 has no recorded result`},
		{"fingerprint not hex", edit(base, start, strings.Replace(start, fp1, `"fingerprint":"ab"`, 1)),
			"history[2] (run_seq 3): call:start has no call object"},
		// The result agrees with the first event of the call, not the second.
		{"start and done disagree", edit(base, done, strings.Replace(done, fp1, fp2, 1), result, result),
			"history[3] (run_seq 4): call:done of step:quote:0 has fingerprint 00000000000000000000000000000000000000000000000000000000000000ff"},
		// The earliest problem is reported.
		{"earliest first", edit(base, done, `"kind":"call:done"`, start, strings.Replace(start, fp1, fp2, 1)),
			"history[2] (run_seq 3): call:start of step:quote:0 has fingerprint 00000000000000000000000000000000000000000000000000000000000000ff"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// The canonical form, and the same bundle indented with keys and
			// results out of order (Read canonicalises it first).
			c, err := bundle.Read(strings.NewReader(tc.in), bundle.Options{})
			if tc.msg == "" {
				if err != nil {
					t.Fatalf("Read: %v", err)
				}
				var ind bytes.Buffer
				c.WriteIndented(&ind)
				if _, err := bundle.Read(bytes.NewReader(reversed(t, ind.Bytes())), bundle.Options{Compress: true}); err != nil {
					t.Fatalf("Read of the reordered form: %v", err)
				}
				return
			}
			wantCode(t, err, messages.BundleCorrupt)
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("error %q does not contain %q", err, tc.msg)
			}
			_, err = bundle.Read(bytes.NewReader(reversed(t, []byte(tc.in))), bundle.Options{Compress: true})
			wantCode(t, err, messages.BundleCorrupt)
			if !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("reordered form: error %q does not contain %q", err, tc.msg)
			}
			// Encode (what a save uses) refuses it too.
			var b bundle.Bundle
			if err := json.Unmarshal([]byte(tc.in), &b); err != nil {
				t.Fatal(err)
			}
			_, err = bundle.Encode(&b)
			wantCode(t, err, messages.BundleCorrupt)
		})
	}
}

// reversed rewrites a JSON bundle with every object's keys and the results
// in reverse order, indented: not canonical, the same bundle.
func reversed(t *testing.T, in []byte) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatal(err)
	}
	if m, ok := v.(map[string]any); ok {
		if res, ok := m["results"].([]any); ok {
			slices.Reverse(res)
		}
	}
	var out bytes.Buffer
	var write func(v any, indent string)
	write = func(v any, indent string) {
		switch x := v.(type) {
		case map[string]any:
			keys := make([]string, 0, len(x))
			for k := range x {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			slices.Reverse(keys)
			out.WriteString("{")
			for i, k := range keys {
				if i > 0 {
					out.WriteString(",")
				}
				name, _ := json.Marshal(k)
				out.WriteString("\n" + indent + "  ")
				out.Write(name)
				out.WriteString(": ")
				write(x[k], indent+"  ")
			}
			out.WriteString("\n" + indent + "}")
		case []any:
			out.WriteString("[")
			for i, e := range x {
				if i > 0 {
					out.WriteString(",")
				}
				out.WriteString("\n" + indent + "  ")
				write(e, indent+"  ")
			}
			out.WriteString("\n" + indent + "]")
		default:
			raw, err := json.Marshal(x)
			if err != nil {
				t.Fatal(err)
			}
			out.Write(raw)
		}
	}
	write(v, "")
	return out.Bytes()
}

// TestValidHash: exactly 64 characters, each 0-9 or a-f, wherever the
// odd one is.
func TestValidHash(t *testing.T) {
	t.Parallel()
	base := strings.Repeat("0", 64)
	for c := range 256 {
		want := (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')
		for _, at := range []int{0, 31, 63} {
			s := base[:at] + string([]byte{byte(c)}) + base[at+1:]
			if got := bundle.ValidHash(s); got != want {
				t.Fatalf("ValidHash with byte %#x at %d = %v, want %v", c, at, got, want)
			}
		}
	}
	for _, s := range []string{"", base[:63], base + "0", strings.ToUpper(string(bundle.HashBytes(nil)))} {
		if bundle.ValidHash(s) {
			t.Fatalf("ValidHash(%q) = true", s)
		}
	}
	if !bundle.ValidHash(string(bundle.HashBytes(nil))) {
		t.Fatal("the hash of nothing is not valid")
	}
}

// A result keeps its input and start_seq through Read, Decode and Encode;
// a start_seq that is not an integer of 1 or more is bundle_corrupt.
func TestResultInputAndStartSeq(t *testing.T) {
	t.Parallel()
	c, err := bundle.Read(bytes.NewReader(readFile(t, "post_fork.input.json")), bundle.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.Decode()
	if err != nil {
		t.Fatal(err)
	}
	var quote bundle.Result
	for _, r := range b.Results {
		if r.Kind == "step" && r.Key == "quote:0" {
			quote = r
		}
	}
	if quote.StartSeq != 3 || !strings.Contains(string(quote.Input), `"qty":2`) {
		t.Fatalf("quote:0 = %+v", quote)
	}
	again, err := bundle.Encode(b)
	if err != nil {
		t.Fatal(err)
	}
	if again.Hash() != c.Hash() {
		t.Fatalf("Encode(Decode) gave %s, want %s", again.Hash(), c.Hash())
	}
	for _, bad := range []string{`0`, `-1`, `1.5`, `"3"`, `null`, `1e3`, `9007199254740993`} {
		doc := strings.Replace(string(readFile(t, "post_fork.canonical.json")), `"start_seq":3`, `"start_seq":`+bad, 1)
		_, err := bundle.Read(strings.NewReader(doc), bundle.Options{})
		if code, _ := messages.CodeOf(err); code != messages.BundleCorrupt || !strings.Contains(err.Error(), "start_seq") {
			t.Errorf("start_seq %s: err = %v, want bundle_corrupt naming start_seq", bad, err)
		}
	}
}
