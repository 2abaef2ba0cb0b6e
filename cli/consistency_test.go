package cli_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// The checkout sample's fraud_check call: call:start at history[8] (run_seq
// 9), call:done at history[9] (run_seq 10), and its result.
const fraudCheckFP = "1a60c0ec5845dc2114680eaf8d0ac3b6394824576455ea66908e44be5e7a6ee5"

// editSample decodes the checkout sample, lets edit change it and encodes it
// again (plain JSON).
func editSample(t *testing.T, edit func(results []any) []any) []byte {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(readFile(t, checkoutFile)))
	dec.UseNumber()
	var b map[string]any
	if err := dec.Decode(&b); err != nil {
		t.Fatal(err)
	}
	b["results"] = edit(b["results"].([]any))
	out, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// fraudCheck returns the index of the fraud_check result.
func fraudCheck(t *testing.T, results []any) int {
	t.Helper()
	for i, r := range results {
		if r.(map[string]any)["key"] == "fraud_check:0" {
			return i
		}
	}
	t.Fatal("the sample has no fraud_check:0 result")
	return -1
}

// TestImportInconsistentCalls: a bundle whose history calls disagree with
// its results is refused bundle_corrupt at import, naming the call, and
// nothing is stored.
func TestImportInconsistentCalls(t *testing.T) {
	t.Parallel()
	other := strings.Repeat("0", 63) + "1"
	for _, tc := range []struct {
		name string
		data []byte
		msg  string
	}{
		{"result fingerprint differs", editSample(t, func(rs []any) []any {
			rs[fraudCheck(t, rs)].(map[string]any)["fingerprint"] = other
			return rs
		}), "history[8] (run_seq 9): call:start of step:fraud_check:0 has fingerprint " + fraudCheckFP + ", but its result has " + other},
		{"result missing", editSample(t, func(rs []any) []any {
			i := fraudCheck(t, rs)
			return append(rs[:i], rs[i+1:]...)
		}), "history[9] (run_seq 10): call:done of step:fraud_check:0 has no recorded result"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			msg := wantRefusal(t, f.run("case", "import", writeFile(t, "case.json", tc.data)), "bundle_corrupt")
			if !strings.Contains(msg, tc.msg) {
				t.Fatalf("message %q does not contain %q", msg, tc.msg)
			}
			r := f.run("case", "list")
			wantOK(t, r)
			if r.stdout != "" {
				t.Fatalf("a refused import stored something\n%s", r)
			}
		})
	}
}

// TestStoredInconsistentCalls: a stored blob whose hash is right but whose
// history disagrees with its results (written by something other than this
// software) is refused bundle_corrupt by every verified read.
func TestStoredInconsistentCalls(t *testing.T) {
	t.Parallel()
	f := setup(t)
	good := f.importFile(checkoutFile)
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	canon, err := dec.DecodeAll(readFile(t, f.blobPath(good)), nil)
	if err != nil {
		t.Fatal(err)
	}
	// Still canonical: the same length, the same order.
	old := `"fingerprint":"` + fraudCheckFP + `","key":"fraud_check:0","kind":"step","result"`
	if bytes.Count(canon, []byte(old)) != 1 {
		t.Fatalf("want the fraud_check result once in the canonical bytes")
	}
	canon = bytes.Replace(canon, []byte(old), []byte(strings.Replace(old, fraudCheckFP, strings.Repeat("f", 64), 1)), 1)
	sum := sha256.Sum256(canon)
	h := hex.EncodeToString(sum[:])
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderCRC(true))
	if err != nil {
		t.Fatal(err)
	}
	blob := enc.EncodeAll(canon, nil)
	enc.Close()
	if err := os.MkdirAll(filepath.Dir(f.blobPath(h)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.blobPath(h), blob, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"case", "show", h},
		{"case", "export", h, "--out", "-"},
		{"case", "run", h, "--replay-only"},
	} {
		msg := wantRefusal(t, f.run(args...), "bundle_corrupt")
		if !strings.Contains(msg, "call:start of step:fraud_check:0 has fingerprint") {
			t.Errorf("%s: message %q does not name the call", strings.Join(args, " "), msg)
		}
	}
}
