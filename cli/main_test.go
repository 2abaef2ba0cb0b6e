package cli_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/internal/testenv"
)

// pyrula is the path of the binary built once for the tests.
var pyrula string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	if fuzzing() {
		// The fuzzers (and each fuzz worker, a process of its own) call no
		// binary: building one per process cost minutes.
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "pyrula-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "make temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if pyrula, err = testenv.BuildBinary(dir, "github.com/pyrula/caseworker/cmd/pyrula"); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return m.Run()
}

// fuzzing says that this process fuzzes (go test -fuzz) or is a fuzz
// worker.
func fuzzing() bool {
	flag.Parse()
	for _, name := range []string{"test.fuzz", "test.fuzzworker"} {
		if f := flag.Lookup(name); f != nil && f.Value.String() != "" && f.Value.String() != "false" {
			return true
		}
	}
	return false
}

// result is what one run of the binary did.
type result struct {
	args   []string
	code   int
	stdout string
	stderr string
}

func (r result) String() string {
	return fmt.Sprintf("pyrula %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(r.args, " "), r.code, r.stdout, r.stderr)
}

// invocation describes one run of the binary.
type invocation struct {
	args  []string
	env   []string // KEY=VALUE added to a clean environment
	stdin []byte
}

// run runs the binary in a clean environment (no PYRULA_* variables).
func run(t *testing.T, inv invocation) result {
	t.Helper()
	cmd := exec.Command(pyrula, inv.args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	cmd.Env = append(cmd.Env, testenv.BinaryEnv()...)
	cmd.Env = append(cmd.Env, inv.env...)
	if inv.stdin != nil {
		cmd.Stdin = bytes.NewReader(inv.stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	r := result{args: inv.args, stdout: stdout.String(), stderr: stderr.String()}
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("run pyrula %v: %v", inv.args, err)
		}
		r.code = ee.ExitCode()
	}
	return r
}

// fixture is a test's own file fixture store.
type fixture struct {
	t   *testing.T
	dir string
}

// setup makes a fresh file fixture store in a temporary directory.
func setup(t *testing.T) *fixture {
	t.Helper()
	return &fixture{t: t, dir: filepath.Join(t.TempDir(), "cases")}
}

// identity is the store's fixture_store identity.
func (f *fixture) identity() string { return "file://" + f.dir }

// run runs the binary with PYRULA_FIXTURE_STORE naming the store.
func (f *fixture) run(args ...string) result {
	f.t.Helper()
	return run(f.t, invocation{args: args, env: []string{"PYRULA_FIXTURE_STORE=" + f.dir}})
}

// runStdin is run with standard input.
func (f *fixture) runStdin(stdin []byte, args ...string) result {
	f.t.Helper()
	return run(f.t, invocation{args: args, env: []string{"PYRULA_FIXTURE_STORE=" + f.dir}, stdin: stdin})
}

// importFile imports a file and returns the hash it printed.
func (f *fixture) importFile(path string) string {
	f.t.Helper()
	r := f.run("case", "import", path)
	wantOK(f.t, r)
	var out struct {
		FixtureHash string `json:"fixture_hash"`
	}
	decodeOne(f.t, r, &out)
	return out.FixtureHash
}

// blobPath is where the file store keeps a bundle.
func (f *fixture) blobPath(hash string) string {
	return filepath.Join(f.dir, hash[:2], hash+".case")
}

// wantOK checks a successful run: exit 0 and nothing on stderr.
func wantOK(t *testing.T, r result) {
	t.Helper()
	if r.code != 0 || r.stderr != "" {
		t.Fatalf("want exit 0 and empty stderr\n%s", r)
	}
}

// wantOKWarned checks a successful run that warns once about unredacted data.
func wantOKWarned(t *testing.T, r result) {
	t.Helper()
	if r.code != 0 {
		t.Fatalf("want exit 0\n%s", r)
	}
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	if len(lines) != 1 || !strings.HasPrefix(lines[0], "warning: ") || !strings.Contains(lines[0], "unredacted") {
		t.Fatalf("want one warning line about unredacted data on stderr\n%s", r)
	}
}

// refusal is the {"code", "message"} object of a refusal.
type refusal struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// wantRefusal checks a refusal: exit 2, {"code", "message"} on stdout with
// the code, nothing on stderr. It returns the message.
func wantRefusal(t *testing.T, r result, code string) string {
	t.Helper()
	if r.code != 2 || r.stderr != "" {
		t.Fatalf("want refusal %s: exit 2 and empty stderr\n%s", code, r)
	}
	var raw map[string]any
	decodeOne(t, r, &raw)
	if len(raw) != 2 {
		t.Fatalf("want exactly code and message in the refusal\n%s", r)
	}
	var got refusal
	decodeOne(t, r, &got)
	if got.Code != code || got.Message == "" {
		t.Fatalf("want code %q with a message, got %+v\n%s", code, got, r)
	}
	return got.Message
}

// wantError checks an invalid-input or operational error: exit 1, nothing on
// stdout, one "error: " line on stderr containing want.
func wantError(t *testing.T, r result, want string) {
	t.Helper()
	if r.code != 1 || r.stdout != "" {
		t.Fatalf("want exit 1 and empty stdout\n%s", r)
	}
	if !strings.HasPrefix(r.stderr, "error: ") || strings.Count(r.stderr, "\n") != 1 || !strings.HasSuffix(r.stderr, "\n") {
		t.Fatalf("want one \"error: \" line on stderr\n%s", r)
	}
	if !strings.Contains(r.stderr, want) {
		t.Fatalf("want stderr to contain %q\n%s", want, r)
	}
}

// decodeOne decodes stdout, which must be exactly one JSON line.
func decodeOne(t *testing.T, r result, v any) {
	t.Helper()
	if strings.Count(r.stdout, "\n") != 1 || !strings.HasSuffix(r.stdout, "\n") {
		t.Fatalf("want one line on stdout\n%s", r)
	}
	if err := json.Unmarshal([]byte(r.stdout), v); err != nil {
		t.Fatalf("decode stdout: %v\n%s", err, r)
	}
}

// decodeLines decodes stdout as JSON lines.
func decodeLines[T any](t *testing.T, r result) []T {
	t.Helper()
	var out []T
	dec := json.NewDecoder(strings.NewReader(r.stdout))
	for dec.More() {
		var v T
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("decode stdout line: %v\n%s", err, r)
		}
		out = append(out, v)
	}
	if n := strings.Count(r.stdout, "\n"); n != len(out) {
		t.Fatalf("want one value per line, got %d lines for %d values\n%s", n, len(out), r)
	}
	return out
}

// readFile reads a test file.
func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeFile writes a test file in a temporary directory and returns its path.
func writeFile(t *testing.T, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// replaceOnce replaces old, which must occur exactly once, in b.
func replaceOnce(t *testing.T, b []byte, old, new string) []byte {
	t.Helper()
	if n := bytes.Count(b, []byte(old)); n != 1 {
		t.Fatalf("want %q exactly once in the sample, found %d", old, n)
	}
	return bytes.Replace(b, []byte(old), []byte(new), 1)
}
