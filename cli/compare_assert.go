package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/pyrula/caseworker/internal/redact"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/suite"
)

// assertionResult is one assertion of --assert on one arm: whether it
// holds and, when not, what was found.
type assertionResult struct {
	Assertion string `json:"assertion"`
	Holds     bool   `json:"holds"`
	Found     string `json:"found,omitempty"`
}

// readAssertions reads --assert FILE: a JSON array of assertions (or one
// object), each the assertion of a run_suite arm; a refusal names the one
// that cannot be checked.
func readAssertions(verb, path string) ([]messages.SuiteAssertion, error) {
	if path == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%s: --assert: %w", verb, err)
	}
	var list []messages.SuiteAssertion
	if trimmed := strings.TrimSpace(string(raw)); strings.HasPrefix(trimmed, "{") {
		var one messages.SuiteAssertion
		err = json.Unmarshal(raw, &one)
		list = []messages.SuiteAssertion{one}
	} else {
		err = json.Unmarshal(raw, &list)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: --assert %s is not a JSON array of assertions: %v", verb, path, err)
	}
	if len(list) == 0 || len(list) > messages.MaxSuiteAssertions {
		return nil, fmt.Errorf("%s: --assert %s holds %d assertions; give 1 to %d", verb, path, len(list), messages.MaxSuiteAssertions)
	}
	for i, a := range list {
		if err := suite.CheckAssertionShape(a); err != nil {
			return nil, fmt.Errorf("%s: --assert %s: assertion %d %v", verb, path, i, err)
		}
	}
	return list, nil
}

// judgeArms checks asserts on every arm's run and puts the results on the
// comparison line; it reports whether every assertion held on every arm.
func judgeArms(arms []compareArm, line *comparisonLine, asserts []messages.SuiteAssertion) bool {
	all := true
	for i, arm := range arms {
		o := arm.report.Outcome
		results := make([]assertionResult, len(asserts))
		for k, a := range asserts {
			found := suite.CheckAssertion(a, o.Result, o)
			results[k] = assertionResult{Assertion: suite.AssertionText(a), Holds: found == "", Found: found}
			all = all && found == ""
		}
		line.Arms[i].Assertions = results
	}
	return all
}

// writeAssertions writes, for people, each arm's assertions that did not
// hold, or that all held.
func writeAssertions(w io.Writer, line comparisonLine) {
	fmt.Fprintln(w)
	for _, arm := range line.Arms {
		failed := 0
		for _, r := range arm.Assertions {
			if !r.Holds {
				failed++
				fmt.Fprintf(w, "arm %d: %s does not hold: %s\n", arm.Arm, cell(r.Assertion), redact.Secrets(oneLine(r.Found)))
			}
		}
		if failed == 0 {
			fmt.Fprintf(w, "arm %d: all %s hold\n", arm.Arm, count(len(arm.Assertions), "assertion", "assertions"))
		}
	}
}
