package cli_test

import (
	"regexp"
	"strings"
	"testing"
)

// pyrula --help lists every exit status, 3 included.
func TestHelpListsExitStatuses(t *testing.T) {
	t.Parallel()
	r := run(t, invocation{args: []string{"--help"}})
	wantOK(t, r)
	for _, want := range []string{
		`0  done`,
		`1  invalid input or an operational error (one "error:" line on stderr)`,
		`2  refused ({"code", "message"} on stdout)`,
		`3  a started run that failed, was cancelled or suspended`,
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("--help lacks %q\n%s", want, r)
		}
	}
}

// pyrula case --help lists every subcommand, and what `case` says it does
// (its line in pyrula --help, its description) names save and run too.
func TestCaseHelpListsEverySubcommand(t *testing.T) {
	t.Parallel()
	subs := []string{"compare", "delete", "diff", "export", "gc", "import", "list", "run", "save", "show", "test"}
	r := run(t, invocation{args: []string{"case", "--help"}})
	wantOK(t, r)
	_, cmds, ok := strings.Cut(r.stdout, "Available Commands:\n")
	if !ok {
		t.Fatalf("no command list\n%s", r)
	}
	for _, sub := range subs {
		if !regexp.MustCompile(`(?m)^  ` + sub + ` +\S`).MatchString(cmds) {
			t.Errorf("case --help does not list %s\n%s", sub, r)
		}
		h := run(t, invocation{args: []string{"case", sub, "--help"}})
		wantOK(t, h)
	}
	if !strings.Contains(r.stdout, "save captures a recorded run") || !strings.Contains(r.stdout, "run runs one") {
		t.Errorf("case --help does not say what save and run do\n%s", r)
	}
	root := run(t, invocation{args: []string{"--help"}})
	line := regexp.MustCompile(`(?m)^  case +(.*)$`).FindStringSubmatch(root.stdout)
	if line == nil {
		t.Fatalf("--help does not list case\n%s", root)
	}
	for _, word := range []string{"Save", "run", "import", "export", "list", "show", "delete", "garbage-collect"} {
		if !strings.Contains(line[1], word) {
			t.Errorf("case is described as %q, which does not mention %s", line[1], word)
		}
	}
}
