package cli_test

import (
	"strings"
	"testing"
)

// An agent with no model client of its own, run without --llm-ref, is
// refused before it starts, with the flag to pass and its values.
func TestAgentWithoutModelClientSaysWhatToPass(t *testing.T) {
	t.Parallel()
	bin := divergeBinary(t)
	dir := t.TempDir()
	r := runIn(t, bin, dir, "dev", "helpdesk_bare")
	if r.code != 1 || !strings.Contains(r.stderr, "helpdesk_bare is an agent with no model client of its own: name one with --llm-ref anthropic|openai") {
		t.Fatalf("want exit 1 naming --llm-ref and its values\n%s", r)
	}
	// An agent with its own client runs without one.
	if r := runIn(t, bin, dir, "dev", "helpdesk"); r.code != 0 {
		t.Fatalf("dev helpdesk\n%s", r)
	}
}
