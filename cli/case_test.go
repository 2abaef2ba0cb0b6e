package cli_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// Hashes of the samples, computed with Python's
// json.dumps(bundle, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
// with results sorted by (kind, key), then sha256.
const (
	checkoutHash = "c0e6f11369da79b15d5ac4c038b075a5088e25e02e7cfefbb21382a881e24178"
	agentHash    = "10b0456b5fb211f36f97e8d169cb354448fbd8dbb975a0d0cd5468a447d9b8a6"
	// absentHash is a valid hash of no stored bundle.
	absentHash = "0000000000000000000000000000000000000000000000000000000000000000"
)

const (
	checkoutFile = "testdata/checkout.json"
	agentFile    = "testdata/support-agent.json"
)

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--help"},
		{"-h"},
		{"help"},
		{"case", "--help"},
		{"case", "import", "--help"},
		{"case", "export", "--help"},
		{"case", "list", "--help"},
		{"case", "show", "--help"},
		{"case", "delete", "--help"},
		{"case", "gc", "--help"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			r := run(t, invocation{args: args})
			wantOK(t, r)
			if !strings.Contains(r.stdout, "Usage:") {
				t.Fatalf("want usage on stdout\n%s", r)
			}
		})
	}
}

func TestHelpMentionsFixtureStore(t *testing.T) {
	t.Parallel()
	r := run(t, invocation{args: []string{"case", "list", "--help"}})
	wantOK(t, r)
	if !strings.Contains(r.stdout, "--fixture-store") {
		t.Fatalf("want --fixture-store in the help\n%s", r)
	}
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, `pyrula needs a command, one of: case, db, dead, dev, enqueue, events, pending, run, targets, version (see "pyrula --help")`},
		{[]string{"case", "save"}, "missing argument TARGET RUN_ID"},
		{[]string{"run"}, "missing argument TARGET"},
		{[]string{"db"}, `pyrula db needs a command, one of: migrate`},
		{[]string{"case"}, `(see "pyrula case --help")`},
		{[]string{"cas"}, `unknown command "cas" for "pyrula" (did you mean "case"?)`},
		{[]string{"case", "imprt"}, `unknown command "imprt" for "pyrula case" (did you mean "import"?)`},
		{[]string{"case", "import"}, `missing argument FILE (see "pyrula case import --help")`},
		{[]string{"case", "show"}, "missing argument HASH"},
		{[]string{"case", "show", absentHash, "extra"}, `unexpected argument "extra"`},
		{[]string{"case", "delete"}, "missing argument HASH"},
		{[]string{"case", "list", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"case", "list", "extra"}, `unexpected argument "extra"`},
		{[]string{"case", "export", absentHash}, `required flag(s) "out" not set`},
		{[]string{"case", "export", "--out"}, "flag needs an argument"},
		{[]string{"case", "gc", "extra"}, `unexpected argument "extra"`},
		{[]string{"case", "gc", "--yes=maybe"}, "invalid argument"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Parallel()
			// A store is configured so that nothing but the usage is wrong.
			r := setup(t).run(tc.args...)
			wantError(t, r, tc.want)
		})
	}
}

func TestNoFixtureStore(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "out.case")
	for _, args := range [][]string{
		{"case", "import", checkoutFile},
		{"case", "import", "-"},
		{"case", "export", checkoutHash, "--out", out},
		{"case", "list"},
		{"case", "show", checkoutHash},
		{"case", "show", checkoutHash, "--values"},
		{"case", "delete", checkoutHash},
		{"case", "gc"},
		{"case", "gc", "--yes"},
		{"case", "list", "--fixture-store", ""},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			t.Parallel()
			r := run(t, invocation{args: args, stdin: readFile(t, checkoutFile)})
			wantRefusal(t, r, "no_fixture_store")
		})
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("export without a store created %s (err %v)", out, err)
	}
}

func TestFixtureStoreResolution(t *testing.T) {
	t.Parallel()
	flagDir := filepath.Join(t.TempDir(), "flag")
	envDir := filepath.Join(t.TempDir(), "env")
	dsn := "postgres://caseworker:s3cr3t-pw@127.0.0.1:1/cases?sslmode=disable"

	importedTo := func(t *testing.T, inv invocation) string {
		t.Helper()
		r := run(t, inv)
		wantOK(t, r)
		var out struct {
			FixtureStore string `json:"fixture_store"`
		}
		decodeOne(t, r, &out)
		return out.FixtureStore
	}

	t.Run("flag before environment", func(t *testing.T) {
		t.Parallel()
		got := importedTo(t, invocation{
			args: []string{"case", "import", checkoutFile, "--fixture-store", flagDir},
			env:  []string{"PYRULA_FIXTURE_STORE=" + envDir, "PYRULA_POSTGRES_DSN=" + dsn},
		})
		if got != "file://"+flagDir {
			t.Fatalf("fixture_store = %q, want file://%s", got, flagDir)
		}
	})
	t.Run("file URL flag", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "url")
		got := importedTo(t, invocation{args: []string{"case", "import", "--fixture-store", "file://" + dir, checkoutFile}})
		if got != "file://"+dir {
			t.Fatalf("fixture_store = %q, want file://%s", got, dir)
		}
	})
	t.Run("PYRULA_FIXTURE_STORE before PYRULA_POSTGRES_DSN", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), "env")
		got := importedTo(t, invocation{
			args: []string{"case", "import", checkoutFile},
			env:  []string{"PYRULA_FIXTURE_STORE=" + dir, "PYRULA_POSTGRES_DSN=" + dsn},
		})
		if got != "file://"+dir {
			t.Fatalf("fixture_store = %q, want file://%s", got, dir)
		}
	})
	t.Run("PYRULA_POSTGRES_DSN last, password redacted", func(t *testing.T) {
		t.Parallel()
		// Nothing listens on port 1: whatever the postgres backend answers,
		// it is not no_fixture_store and it never shows the password.
		r := run(t, invocation{args: []string{"case", "list"}, env: []string{"PYRULA_POSTGRES_DSN=" + dsn}})
		if r.code == 0 || strings.Contains(r.stdout, "no_fixture_store") {
			t.Fatalf("want the postgres store to be tried and fail\n%s", r)
		}
		if strings.Contains(r.stdout+r.stderr, "s3cr3t") {
			t.Fatalf("password printed\n%s", r)
		}
	})
	t.Run("flag password redacted", func(t *testing.T) {
		t.Parallel()
		for _, u := range []string{dsn, "s3://AKIA:s3cr3t-key@bucket/prefix?region=eu-west-1"} {
			r := run(t, invocation{args: []string{"case", "list", "--fixture-store", u}})
			if r.code == 0 {
				t.Fatalf("want failure\n%s", r)
			}
			if strings.Contains(r.stdout+r.stderr, "s3cr3t") {
				t.Fatalf("password printed\n%s", r)
			}
		}
	})
}

func TestImportForms(t *testing.T) {
	t.Parallel()
	plain := readFile(t, checkoutFile)
	var gz bytes.Buffer
	gw := gzip.NewWriter(&gz)
	if _, err := gw.Write(plain); err != nil {
		t.Fatal(err)
	}
	if err := gw.Close(); err != nil {
		t.Fatal(err)
	}
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	zst := enc.EncodeAll(plain, nil)
	enc.Close()
	// The canonical bytes themselves, with results in another order.
	var compact bytes.Buffer
	if err := json.Compact(&compact, plain); err != nil {
		t.Fatal(err)
	}

	want := func(f *fixture) string {
		return `{"fixture_hash":"` + checkoutHash + `","fixture_store":"` + f.identity() + `",` +
			`"manifest_summary":{"format":1,"kind":"workflow","target_name":"checkout","fork_after_seq":10,` +
			`"capture":{"complete":true,"missing":[]},"result_count":8,"history_count":10}}` + "\n"
	}

	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"plain", plain},
		{"bom", append([]byte("\ufeff"), plain...)},
		{"compact", compact.Bytes()},
		{"gzip", gz.Bytes()},
		{"zstd", zst},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			r := f.run("case", "import", writeFile(t, "case."+tc.name, tc.data))
			wantOK(t, r)
			if r.stdout != want(f) {
				t.Fatalf("import output\n got %s\nwant %s", r.stdout, want(f))
			}
		})
		t.Run(tc.name+" stdin", func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			r := f.runStdin(tc.data, "case", "import", "-")
			wantOK(t, r)
			if r.stdout != want(f) {
				t.Fatalf("import output\n got %s\nwant %s", r.stdout, want(f))
			}
		})
	}
}

func TestImportTwiceKeepsOneCopy(t *testing.T) {
	t.Parallel()
	f := setup(t)
	first := f.run("case", "import", checkoutFile)
	wantOK(t, first)
	second := f.run("case", "import", checkoutFile)
	wantOK(t, second)
	if first.stdout != second.stdout {
		t.Fatalf("second import printed\n%s\nfirst\n%s", second.stdout, first.stdout)
	}
	lines := decodeLines[map[string]any](t, f.run("case", "list"))
	if len(lines) != 1 || lines[0]["fixture_hash"] != checkoutHash {
		t.Fatalf("want one stored bundle, got %v", lines)
	}
}

func TestImportAgent(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := f.run("case", "import", agentFile)
	wantOK(t, r)
	want := `{"fixture_hash":"` + agentHash + `","fixture_store":"` + f.identity() + `",` +
		`"manifest_summary":{"format":1,"kind":"agent","target_name":"support_agent","fork_after_seq":6,` +
		`"capture":{"complete":true,"missing":[]},"result_count":5,"history_count":6}}` + "\n"
	if r.stdout != want {
		t.Fatalf("import output\n got %s\nwant %s", r.stdout, want)
	}
}

func TestImportRefusals(t *testing.T) {
	t.Parallel()
	plain := readFile(t, checkoutFile)
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	zst := enc.EncodeAll(plain, nil)
	enc.Close()

	for _, tc := range []struct {
		name string
		data []byte
		code string
	}{
		{"garbage", []byte("this is not a bundle\n"), "bundle_corrupt"},
		{"empty", nil, "bundle_corrupt"},
		{"truncated json", plain[:len(plain)/2], "bundle_corrupt"},
		{"truncated zstd", zst[:len(zst)/2], "bundle_corrupt"},
		{"json array", []byte("[1, 2, 3]\n"), "bundle_corrupt"},
		{"missing history", replaceOnce(t, plain, `"history": [`, `"histories": [`), "bundle_corrupt"},
		{"format 2", replaceOnce(t, plain, `"format": 1,`, `"format": 2,`), "format_unsupported"},
		{"format string", replaceOnce(t, plain, `"format": 1,`, `"format": "1",`), "format_unsupported"},
		{"kind robot", replaceOnce(t, plain, `"kind": "workflow",`, `"kind": "robot",`), "format_unsupported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			r := f.run("case", "import", writeFile(t, "case.json", tc.data))
			wantRefusal(t, r, tc.code)
			// Nothing was stored.
			r = f.run("case", "list")
			wantOK(t, r)
			if r.stdout != "" {
				t.Fatalf("a refused import stored something\n%s", r)
			}
		})
	}
}

func TestImportUnreadableFile(t *testing.T) {
	t.Parallel()
	f := setup(t)
	missing := filepath.Join(t.TempDir(), "nope.json")
	wantError(t, f.run("case", "import", missing), "nope.json")
	wantError(t, f.run("case", "import", t.TempDir()), "import")
}

func TestInvalidFixtureHash(t *testing.T) {
	t.Parallel()
	out := filepath.Join(t.TempDir(), "out")
	for _, h := range []string{
		"9f2c",
		strings.ToUpper(checkoutHash),
		checkoutHash[:63],
		checkoutHash + "0",
		strings.Repeat("g", 64),
		"../../etc/passwd",
	} {
		for _, args := range [][]string{
			{"case", "show", h},
			{"case", "show", h, "--values"},
			{"case", "export", h, "--out", out},
			{"case", "delete", h},
		} {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				t.Parallel()
				r := setup(t).run(args...)
				wantRefusal(t, r, "invalid_fixture_hash")
			})
		}
	}
}

func TestBundleMissing(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.importFile(checkoutFile)
	out := filepath.Join(t.TempDir(), "out.case")
	for _, args := range [][]string{
		{"case", "show", absentHash},
		{"case", "show", absentHash, "--values"},
		{"case", "export", absentHash, "--out", out},
		{"case", "export", absentHash, "--out", out, "--json"},
		{"case", "export", absentHash, "--out", "-"},
	} {
		r := f.run(args...)
		wantRefusal(t, r, "bundle_missing")
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("export of a missing bundle created %s (err %v)", out, err)
	}
}

func TestBundleCorrupt(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		corrupt func(t *testing.T, blob []byte) []byte
	}{
		{"flipped byte", func(t *testing.T, b []byte) []byte {
			b = bytes.Clone(b)
			b[len(b)/2] ^= 0x40
			return b
		}},
		{"flipped last byte", func(t *testing.T, b []byte) []byte {
			b = bytes.Clone(b)
			b[len(b)-1] ^= 0x01
			return b
		}},
		{"truncated", func(t *testing.T, b []byte) []byte { return b[:len(b)-7] }},
		{"another bundle", func(t *testing.T, b []byte) []byte {
			// A valid blob of another bundle under this hash.
			other := setup(t)
			h := other.importFile(agentFile)
			return readFile(t, other.blobPath(h))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			h := f.importFile(checkoutFile)
			path := f.blobPath(h)
			if err := os.WriteFile(path, tc.corrupt(t, readFile(t, path)), 0o644); err != nil {
				t.Fatal(err)
			}

			wantRefusal(t, f.run("case", "show", h), "bundle_corrupt")
			wantRefusal(t, f.run("case", "show", h, "--values"), "bundle_corrupt")
			wantRefusal(t, f.run("case", "export", h, "--out", "-"), "bundle_corrupt")

			// A failed export leaves neither a partial file nor a temporary
			// one, and does not touch an existing file.
			outDir := t.TempDir()
			fresh := filepath.Join(outDir, "fresh.case")
			old := filepath.Join(outDir, "old.json")
			if err := os.WriteFile(old, []byte("old\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			wantRefusal(t, f.run("case", "export", h, "--out", fresh), "bundle_corrupt")
			wantRefusal(t, f.run("case", "export", h, "--out", old, "--json"), "bundle_corrupt")
			if got := dirNames(t, outDir); !slices.Equal(got, []string{"old.json"}) {
				t.Fatalf("export directory holds %v, want only old.json", got)
			}
			if got := readFile(t, old); string(got) != "old\n" {
				t.Fatalf("failed export changed the existing file to %q", got)
			}
		})
	}
}

func TestExportRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		sample string
		hash   string
	}{
		{"checkout", checkoutFile, checkoutHash},
		{"agent", agentFile, agentHash},
	} {
		t.Run(tc.name+" json", func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			h := f.importFile(tc.sample)
			outDir := t.TempDir()
			out := filepath.Join(outDir, h+".json")
			r := f.run("case", "export", h, "--out", out, "--json")
			wantOKWarned(t, r)
			data := readFile(t, out)
			wantExportOutput(t, r, h, out, "json", len(data))
			if !bytes.HasPrefix(data, []byte("{\n  \"history\": [\n")) || !bytes.HasSuffix(data, []byte("}\n")) {
				t.Fatalf("want indented JSON with sorted keys and a final newline, got %.80q", data)
			}
			if !json.Valid(data) {
				t.Fatal("export --json wrote invalid JSON")
			}
			if got := dirNames(t, outDir); !slices.Equal(got, []string{h + ".json"}) {
				t.Fatalf("export directory holds %v", got)
			}
			if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o644 {
				t.Fatalf("exported file mode: %v %v", fi.Mode(), err)
			}
			// Import into another store gives the same hash back.
			if got := setup(t).importFile(out); got != tc.hash {
				t.Fatalf("import of the export gives %s, want %s", got, tc.hash)
			}
		})
		t.Run(tc.name+" blob", func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			h := f.importFile(tc.sample)
			out := filepath.Join(t.TempDir(), "run.case")
			r := f.run("case", "export", "--out", out, h)
			wantOKWarned(t, r)
			data := readFile(t, out)
			wantExportOutput(t, r, h, out, "zstd", len(data))
			if !bytes.HasPrefix(data, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
				t.Fatalf("want a zstd frame, got % x", data[:min(8, len(data))])
			}
			if got := setup(t).importFile(out); got != tc.hash {
				t.Fatalf("import of the export gives %s, want %s", got, tc.hash)
			}
		})
		t.Run(tc.name+" stdout", func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			h := f.importFile(tc.sample)
			for _, args := range [][]string{
				{"case", "export", h, "--out", "-"},
				{"case", "export", h, "--out", "-", "--json"},
			} {
				r := f.run(args...)
				wantOKWarned(t, r)
				g := setup(t)
				imp := g.runStdin([]byte(r.stdout), "case", "import", "-")
				wantOK(t, imp)
				if !strings.Contains(imp.stdout, `"fixture_hash":"`+tc.hash+`"`) {
					t.Fatalf("import of %v gives\n%s", args, imp)
				}
			}
		})
	}
}

func TestExportOverwrites(t *testing.T) {
	t.Parallel()
	f := setup(t)
	h := f.importFile(checkoutFile)
	out := filepath.Join(t.TempDir(), "case.json")
	if err := os.WriteFile(out, []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	wantOKWarned(t, f.run("case", "export", h, "--out", out, "--json"))
	if got := setup(t).importFile(out); got != h {
		t.Fatalf("overwritten export imports as %s, want %s", got, h)
	}
}

func TestExportUnwritable(t *testing.T) {
	t.Parallel()
	f := setup(t)
	h := f.importFile(checkoutFile)
	out := filepath.Join(t.TempDir(), "no", "such", "dir", "case.json")
	r := f.run("case", "export", h, "--out", out)
	if r.code != 1 || r.stdout != "" || !strings.Contains(r.stderr, "error: ") || !strings.Contains(r.stderr, "case.json") {
		t.Fatalf("want an error naming the output\n%s", r)
	}
	wantError(t, f.run("case", "export", h, "--out", ""), "--out")
}

// wantExportOutput checks export's JSON line.
func wantExportOutput(t *testing.T, r result, hash, out, format string, size int) {
	t.Helper()
	var got map[string]any
	decodeOne(t, r, &got)
	want := map[string]any{"fixture_hash": hash, "out": out, "format": format, "bytes": float64(size)}
	if len(got) != len(want) {
		t.Fatalf("export output %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("export output %v, want %v", got, want)
		}
	}
}

// dirNames lists a directory.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// listLine is one line of case list.
type listLine struct {
	FixtureHash string `json:"fixture_hash"`
	SizeBytes   int64  `json:"size_bytes"`
	UpdatedAt   string `json:"updated_at"`
}

func TestList(t *testing.T) {
	t.Parallel()
	f := setup(t)
	r := f.run("case", "list")
	wantOK(t, r)
	if r.stdout != "" {
		t.Fatalf("want no lines for an empty store\n%s", r)
	}

	before := time.Now().Add(-time.Minute)
	f.importFile(checkoutFile)
	f.importFile(agentFile)
	after := time.Now().Add(time.Minute)

	r = f.run("case", "list")
	wantOK(t, r)
	lines := decodeLines[listLine](t, r)
	var hashes []string
	for _, l := range lines {
		hashes = append(hashes, l.FixtureHash)
		fi, err := os.Stat(f.blobPath(l.FixtureHash))
		if err != nil {
			t.Fatal(err)
		}
		if l.SizeBytes != fi.Size() {
			t.Errorf("%s: size_bytes %d, stored blob is %d bytes", l.FixtureHash, l.SizeBytes, fi.Size())
		}
		at, err := time.Parse(time.RFC3339, l.UpdatedAt)
		if err != nil || !strings.HasSuffix(l.UpdatedAt, "Z") {
			t.Errorf("%s: updated_at %q is not RFC 3339 UTC (%v)", l.FixtureHash, l.UpdatedAt, err)
		}
		if at.Before(before) || at.After(after) {
			t.Errorf("%s: updated_at %s is not about now", l.FixtureHash, at)
		}
	}
	// Sorted by hash: the agent's hash sorts first.
	if want := []string{agentHash, checkoutHash}; !slices.Equal(hashes, want) {
		t.Fatalf("list hashes %v, want %v", hashes, want)
	}
	if keys := keysOf(t, r.stdout); !slices.Equal(keys, []string{"fixture_hash", "size_bytes", "updated_at", "target", "kind", "fork_after_seq"}) {
		t.Fatalf("list line keys %v", keys)
	}
}

// keysOf returns the keys, in order, of the first JSON object in s.
func keysOf(t *testing.T, s string) []string {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(s))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("not an object: %.80q", s)
	}
	var keys []string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, tok.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

func TestDelete(t *testing.T) {
	t.Parallel()
	f := setup(t)
	h := f.importFile(checkoutFile)
	other := f.importFile(agentFile)

	r := f.run("case", "delete", h)
	wantOK(t, r)
	if want := `{"fixture_hash":"` + h + `","deleted":true}` + "\n"; r.stdout != want {
		t.Fatalf("delete printed %s, want %s", r.stdout, want)
	}
	r = f.run("case", "delete", h)
	wantOK(t, r)
	if want := `{"fixture_hash":"` + h + `","deleted":false}` + "\n"; r.stdout != want {
		t.Fatalf("second delete printed %s, want %s", r.stdout, want)
	}
	wantRefusal(t, f.run("case", "show", h), "bundle_missing")
	lines := decodeLines[listLine](t, f.run("case", "list"))
	if len(lines) != 1 || lines[0].FixtureHash != other {
		t.Fatalf("after delete the store lists %v, want only %s", lines, other)
	}
	// Deleting from a store that never held anything is fine too.
	r = setup(t).run("case", "delete", absentHash)
	wantOK(t, r)
	if !strings.Contains(r.stdout, `"deleted":false`) {
		t.Fatalf("delete of an absent bundle\n%s", r)
	}
}
