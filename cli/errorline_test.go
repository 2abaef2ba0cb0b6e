package cli_test

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pyrula/caseworker/version"
)

// TestErrorLinesAreValidUTF8: an argument with invalid UTF-8 (a run id, a
// path, a target, a hash, a flag) is echoed in the error line, or a
// refusal's message, with each invalid sequence replaced by U+FFFD: what
// the CLI prints is always valid UTF-8.
func TestErrorLinesAreValidUTF8(t *testing.T) {
	t.Parallel()
	agent := sampleCase("support-agent-recorded.json")
	for _, tc := range []struct {
		args []string
		want string // in the error line (or the refusal's message), after replacement
		code int
	}{
		{[]string{"events", "run_\xff"}, "run_\uFFFD", 1},
		{[]string{"events", "run_\xff", "--fork-points"}, "run_\uFFFD", 1},
		{[]string{"case", "run", "/cases/x\xfe\xff.json"}, "no bundle file /cases/x\uFFFD.json", 1},
		{[]string{"case", "run", agent, "--run-id", "\xff", "--target", "n\xffpe"}, `no target "n\xffpe" is registered`, 1}, // quoted
		{[]string{"case", "run", agent, "--prompt-file", "/no/such/\xc3"}, "/no/such/\uFFFD", 1},
		{[]string{"case", "run", agent, "--allow-write", "tool:\xff"}, "names no tool or step", 1},
		{[]string{"case", "run", agent, "--\xff"}, "unknown flag: --\uFFFD", 1},
		{[]string{"case", "show", "ab\xff"}, "ab\\xff", 2},
	} {
		r := run(t, invocation{args: tc.args})
		if r.code != tc.code {
			t.Errorf("want exit %d\n%s", tc.code, r)
			continue
		}
		if !utf8.ValidString(r.stdout) || !utf8.ValidString(r.stderr) {
			t.Errorf("invalid UTF-8 in the output\n%q\n%q", r.stdout, r.stderr)
			continue
		}
		if tc.code == 2 {
			if msg := wantRefusal(t, r, "invalid_fixture_hash"); !strings.Contains(msg, tc.want) {
				t.Errorf("refusal message %q, want %q in it", msg, tc.want)
			}
			continue
		}
		wantError(t, r, tc.want)
	}
}

// TestVersion: `version` and `--version` print the version, as the
// worker's `version` does.
func TestVersion(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"version"}, {"--version"}} {
		r := run(t, invocation{args: args})
		wantOK(t, r)
		if r.stdout != version.Version+"\n" {
			t.Errorf("stdout %q, want %q\n%s", r.stdout, version.Version+"\n", r)
		}
	}
	wantError(t, run(t, invocation{args: []string{"version", "x"}}), `unexpected argument "x"`)
	r := run(t, invocation{args: []string{"--help"}})
	if !strings.Contains(r.stdout, "  version ") || !strings.Contains(r.stdout, "--version") {
		t.Errorf("--help lists no version command or flag\n%s", r)
	}
}
