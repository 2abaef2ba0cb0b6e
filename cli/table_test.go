package cli_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// wantLines checks that every pattern matches a line of the output (its
// trailing spaces left out).
func wantLines(t *testing.T, r result, patterns ...string) {
	t.Helper()
	for _, p := range patterns {
		if !regexpLine(r.stdout, p) {
			t.Errorf("no line matches %s\n%s", p, r)
		}
	}
}

// block is the part of s from the line that is heading to the next blank
// line: a detail block of a table.
func block(s, heading string) string {
	i := strings.Index(s, "\n"+heading+"\n")
	if i < 0 {
		return ""
	}
	rest := s[i+1:]
	if j := strings.Index(rest, "\n\n"); j >= 0 {
		rest = rest[:j]
	}
	return rest
}

// TestCaseRunTable: case run --format table renders the same records as
// the JSON lines: a row per call line with its provenance and, for a
// changed call, its role (cause, independent, consequent with the call
// that caused it) and what changed; the outcome's cause, changes, changed
// axes and counts; the detail of the cause's change. The exit status is
// JSON mode's.
func TestCaseRunTable(t *testing.T) {
	t.Parallel()
	args := []string{sampleCase("checkout-recorded.json"), "--from-start", "--input", "qty=5",
		"--allow-write", "step:reserve", "--allow-write", "step:child:0"}
	js := caseRunArgs(t, args...)
	wantOK(t, js)
	calls, out := outcomeOf(t, js)
	all := decodeLines[struct {
		Cause   string `json:"cause"`
		Changes []struct {
			Call     string `json:"call"`
			Role     string `json:"role"`
			CausedBy string `json:"caused_by"`
		} `json:"changes"`
	}](t, js)
	o := all[len(all)-1]

	r := caseRunArgs(t, append(args, "--format", "table")...)
	wantOK(t, r)
	if strings.Contains(r.stdout, "{") {
		t.Errorf("JSON in the table\n%s", r)
	}
	wantLines(t, r, `^SEQ +CALL +EFFECT +PROVENANCE +CHANGE$`,
		`^0 +step:quote:0 +read +changed +cause: input fields changed \$\.qty$`,
		`^1 +step:reserve:0 +write +changed +independent: `,
		`^\d+ +step:format_receipt:0 +pure +changed +consequent, caused by step:`,
		`^status: +complete$`, `^cause: +step:quote:0$`, `^changed: +inputs$`,
		fmt.Sprintf(`^calls: +0 prefix call\(s\) verified; 5 reused, 0 simulated, 0 live, 4 changed; %d live call\(s\)$`, out.LiveCalls),
		`^code version: +examples/v1 recorded, examples/v1 current$`)
	for _, c := range calls {
		wantLines(t, r, fmt.Sprintf(`^\d+ +%s +\w+ +%s( |$)`, regexp.QuoteMeta(c.Kind+":"+c.Key), c.Provenance))
	}
	roles := map[string]bool{}
	for i, c := range o.Changes {
		roles[c.Role] = true
		role := c.Role
		if c.CausedBy != "" {
			role += ", caused by " + c.CausedBy
		}
		label := `^ +`
		if i == 0 {
			label = `^changes: +`
		}
		wantLines(t, r, label+regexp.QuoteMeta(c.Call)+` +`+regexp.QuoteMeta(role)+`$`)
	}
	if !roles["cause"] || !roles["independent"] || !roles["consequent"] || o.Cause != "step:quote:0" {
		t.Fatalf("the sample run should have every role: %+v", o)
	}
	cause := block(r.stdout, "cause step:quote:0:")
	for _, want := range []string{"call:           step:quote:0 (seq 0)", "role:           cause", "changed:        $.qty", "fingerprint:    recorded "} {
		if !strings.Contains(cause, want) {
			t.Errorf("the cause's detail lacks %q\n%s", want, r)
		}
	}
	if strings.Contains(cause, "values:") {
		t.Errorf("values without --values\n%s", r)
	}
}

// TestCaseRunRefusalTable: a prefix_diverged refusal in a table: exit 2,
// the code, message and the divergence's detail (the path, with
// --values its values), nothing on stderr.
func TestCaseRunRefusalTable(t *testing.T) {
	t.Parallel()
	r := caseRunArgs(t, sampleCase("checkout-recorded.json"), "--input", "qty=5", "--format", "table", "--values")
	if r.code != 2 || r.stderr != "" {
		t.Fatalf("want exit 2 and a quiet stderr\n%s", r)
	}
	wantLines(t, r, `^refused: +prefix_diverged$`, `^message: +prefix call 0 step:quote:0: `, `^stopped at: +step:quote:0$`, `^divergence:$`)
	d := block(r.stdout, "divergence:")
	for _, re := range []string{`(?m)^  call: +step:quote:0 \(seq 0\)$`, `(?m)^  role: +cause$`,
		`(?m)^  fingerprint: +recorded [0-9a-f]{12}, actual [0-9a-f]{12}$`, `(?m)^  changed: +\$\.qty$`, `(?m)^  values: +\$\.qty: 2 → 5$`} {
		if !regexp.MustCompile(re).MatchString(d) {
			t.Errorf("the divergence's detail does not match %s\n%s", re, r)
		}
	}
	r = caseRunArgs(t, sampleCase("checkout-recorded.json"), "--input", "qty=5", "--format", "table")
	if r.code != 2 || strings.Contains(r.stdout, "→") || !strings.Contains(block(r.stdout, "divergence:"), "$.qty") {
		t.Errorf("without --values: want the path and no values\n%s", r)
	}
}

// TestCaseRunModelTable: a changed system prompt (replay-only, a stop):
// the detail shows the model parts and the prompt's line diff as it is.
func TestCaseRunModelTable(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if r, _, out := dev(t, dir, "support_agent", "--dir", dir); out.Status != "complete" {
		t.Fatalf("record\n%s", r)
	}
	prompt := writeFile(t, "prompt.txt", []byte("You are a terse support agent.\nAnswer briefly.\n"))
	r := caseRunArgs(t, filepath.Join(dir, "support_agent.case"), "--replay-only", "--prompt-file", prompt, "--format", "table")
	if r.code != 3 || r.stderr != "" {
		t.Fatalf("want exit 3\n%s", r)
	}
	wantLines(t, r, `^status: +error replay_diverged \(input_changed\)$`, `^changed: +prompt$`, `^never made: +model:1, `)
	d := block(r.stdout, "divergence:")
	for _, re := range []string{`(?m)^  call: +model:0 \(seq 0\)$`, `(?m)^  model parts: +system$`,
		`(?m)^  system prompt: +@@ -1,1 \+1,2 @@$`, `(?m)^ +-You are a support agent\. `, `(?m)^ +\+You are a terse support agent\.$`, `(?m)^ +\+Answer briefly\.$`} {
		if !regexp.MustCompile(re).MatchString(d) {
			t.Errorf("the divergence's detail does not match %s\n%s", re, r)
		}
	}
}

// TestFormatInvalid: --format other than json or table is invalid input,
// checked before anything else (no store, no Valkey needed).
func TestFormatInvalid(t *testing.T) {
	t.Parallel()
	sample := sampleCase("checkout-recorded.json")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"case", "run", sample, "--format", "xml"}, "case run: --format xml: want json or table"},
		{[]string{"case", "test", sample, "--format", "yaml"}, "case test: --format yaml: want json or table"},
		{[]string{"case", "compare", sampleCase("support-agent-recorded.json"), "--model", "a", "--model", "b", "--format", "html"}, "case compare: --format html: want json or table"},
		{[]string{"case", "list", "--format", "csv"}, "case list: --format csv: want json or table"},
		{[]string{"enqueue", "start_run", "--body", "{}", "--format", "text"}, "enqueue: --format text: want json or table"},
		{[]string{"case", "run", sample, "--format", ""}, `case run: --format "": want json or table`},
	} {
		wantError(t, run(t, invocation{args: tc.args}), tc.want)
	}
}

// suiteDir writes a directory of three cases: the two recorded samples
// and the checkout sample with qty 5 in its inputs, whose prefix diverges.
func suiteDir(t *testing.T) (dir, failing string) {
	t.Helper()
	dir = t.TempDir()
	for _, name := range []string{"checkout-recorded.json", "support-agent-recorded.json"} {
		if err := os.WriteFile(filepath.Join(dir, name), readFile(t, sampleCase(name)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	edited := editedSample(t, "checkout-recorded.json", func(b map[string]any) {
		b["manifest"].(map[string]any)["inputs"].(map[string]any)["qty"] = 5
	})
	failing = filepath.Join(dir, "checkout-qty5.json")
	if err := os.WriteFile(failing, readFile(t, edited), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir, failing
}

// TestCaseTestTable: a row per case with its status, target, file, code
// and divergence; the failing case's detail names the path; the summary
// line; exit 3 as in JSON mode. A hash argument shows as its first 12
// characters.
func TestCaseTestTable(t *testing.T) {
	t.Parallel()
	dir, failing := suiteDir(t)
	r := run(t, invocation{args: []string{"case", "test", dir, "--format", "table"}})
	if r.code != 3 || r.stderr != "" {
		t.Fatalf("want exit 3 and a quiet stderr\n%s", r)
	}
	q := regexp.QuoteMeta
	wantLines(t, r, `^STATUS +TARGET +CASE +CODE/REASON +DIVERGENCE$`,
		`^fail +checkout +`+q(failing)+` +prefix_diverged +step:quote:0: input fields changed \$\.qty$`,
		`^pass +checkout +`+q(filepath.Join(dir, "checkout-recorded.json"))+` +- +-$`,
		`^pass +support_agent +`+q(filepath.Join(dir, "support-agent-recorded.json"))+` +- +-$`,
		`^3 cases: 2 passed, 1 failed, 0 errors in \d+ ms$`)
	d := block(r.stdout, "FAIL "+failing+": prefix_diverged")
	for _, re := range []string{`(?m)^  message: +prefix call 0 step:quote:0: `, `(?m)^  divergence:$`,
		`(?m)^    call: +step:quote:0 \(seq 0\)$`, `(?m)^    changed: +\$\.qty$`} {
		if !regexp.MustCompile(re).MatchString(d) {
			t.Errorf("the failure's detail does not match %s\n%s", re, r)
		}
	}
	if strings.Contains(r.stdout, "PASS ") {
		t.Errorf("a detail block for a passing case\n%s", r)
	}

	f := setup(t)
	h := f.importFile(sampleCase("checkout-recorded.json"))
	r = f.run("case", "test", h, "--format", "table")
	wantOK(t, r)
	wantLines(t, r, `^pass +checkout +`+h[:12]+` +- +-$`, `^1 case: 1 passed, 0 failed, 0 errors in \d+ ms$`)
}

// TestCaseTestValuesWarnsOnce: case test --values puts the values in the
// divergences and warns once on stderr whatever the number of cases;
// without --values, no values and no warning.
func TestCaseTestValuesWarnsOnce(t *testing.T) {
	t.Parallel()
	dir, failing := suiteDir(t)
	r := run(t, invocation{args: []string{"case", "test", dir, "--values", "--parallel", "3"}})
	if r.code != 3 {
		t.Fatalf("want exit 3\n%s", r)
	}
	if lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n"); len(lines) != 1 ||
		lines[0] != "warning: the output of case test --values holds the run's inputs and outputs unredacted; treat it like the data the run touched" {
		t.Fatalf("want one warning line on stderr\n%s", r)
	}
	var got struct {
		File       string
		Divergence struct {
			Diff struct {
				Values map[string]map[string]json.RawMessage
			}
		}
	}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if strings.Contains(line, `"file":"`+failing+`"`) {
			if err := json.Unmarshal([]byte(line), &got); err != nil {
				t.Fatal(err)
			}
		}
	}
	if v := got.Divergence.Diff.Values["$.qty"]; string(v["recorded"]) != "2" || string(v["actual"]) != "5" {
		t.Errorf("want the values of $.qty in the divergence, got %+v\n%s", got, r)
	}

	r = run(t, invocation{args: []string{"case", "test", dir, "--values", "--format", "table"}})
	if r.code != 3 || strings.Count(r.stderr, "warning: ") != 1 {
		t.Fatalf("table: want exit 3 and one warning\n%s", r)
	}
	wantLines(t, r, `^    values: +\$\.qty: 2 → 5$`)

	r = run(t, invocation{args: []string{"case", "test", dir}})
	if r.code != 3 || r.stderr != "" || strings.Contains(r.stdout, `"values"`) {
		t.Fatalf("without --values: want no warning and no values\n%s", r)
	}
}

// TestCaseCompareTable: the arms side by side (model, status, live calls,
// tool calls, cost, the same result), each arm's changes against arm 1 and
// the recording, the verdict; the same as the comparison line says.
func TestCaseCompareTable(t *testing.T) {
	t.Parallel()
	sample := sampleCase("support-agent-recorded.json")
	args := []string{"case", "compare", sample, "--model", "local-support-1", "--model", "local-support-2"}
	js := run(t, invocation{args: args})
	if js.code != 0 {
		t.Fatalf("compare\n%s", js)
	}
	_, cmp := compareOf(t, js)
	arm1 := caseRunArgs(t, sample, "--model", "local-support-1")
	calls, _ := outcomeOf(t, arm1)
	tools := 0
	for _, c := range calls {
		if c.Kind == "tool" {
			tools++
		}
	}

	r := run(t, invocation{args: append(args, "--format", "table")})
	if r.code != 0 || !strings.HasPrefix(r.stderr, "warning: 3 live model call(s)") {
		t.Fatalf("want exit 0 and the own-client warning\n%s", r)
	}
	yn := map[bool]string{true: "yes", false: "no"}
	wantLines(t, r, `^ARM +1 +2$`, `^model +local-support-1 +local-support-2$`, `^prompt file +- +-$`,
		`^status +complete +complete$`, `^code +- +-$`,
		fmt.Sprintf(`^live calls +%d +%d$`, cmp.Arms[0].LiveCalls, cmp.Arms[1].LiveCalls),
		fmt.Sprintf(`^tool calls +%d +%d$`, tools, tools),
		`^cost +\$0 +\$0 \(not observable\)$`,
		`^same result as arm 1 +- +`+yn[*cmp.Arms[1].VsFirst.SameResult]+`$`,
		`^arm 1:$`, `^  vs recording: +0 call\(s\) changed, 0 added, 0 removed, \d+ the same$`,
		`^arm 2:$`, fmt.Sprintf(`^  vs arm 1: +%d call\(s\) changed, `, cmp.Arms[1].VsFirst.Calls["changed"]),
		`^    CALL +CHANGE$`, `^    model:0 +changed fingerprint, input \(\$\.model\)`,
		fmt.Sprintf(`^same status: %s; same result: %s; same calls: %s$`, yn[cmp.SameStatus], yn[cmp.SameResult], yn[cmp.SameCalls]))
	for _, c := range cmp.Arms[1].VsRecording.Changes {
		wantLines(t, r, `^    `+regexp.QuoteMeta(c.Call)+` +changed `)
	}
}

// TestEnqueueFollowTable: enqueue --follow --format table prints a short
// line per event as it arrives, then the run's summary: for a case run its
// outcome (cause, changes with their roles, changed axes, counts) and the
// divergence's detail from its events.
func TestEnqueueFollowTable(t *testing.T) {
	t.Parallel()
	e := startWorker(t)
	r := e.run("start_run", "--body", `{"target_name":"checkout","inputs":{"delay_ms":1}}`, "--follow", "--timeout", "30s")
	wantOK(t, r)
	lines := decodeLines[map[string]any](t, r)
	runID := lines[0]["result"].(map[string]any)["run_id"].(string)
	fork := 0.0
	for _, ev := range lines[1:] {
		if c, ok := ev["call"].(map[string]any); ok && ev["kind"] == "call:done" && c["key"] == "quote:0" {
			fork = ev["run_seq"].(float64)
		}
	}
	if fork == 0 {
		t.Fatalf("no call:done of quote\n%s", r)
	}

	// A plain run: its events, then its id and status.
	r = e.run("start_run", "--body", `{"target_name":"checkout","inputs":{"delay_ms":1}}`, "--follow", "--timeout", "30s", "--format", "table")
	wantOK(t, r)
	wantLines(t, r, `^reply msg_[0-9a-f]+ start_run: ok \{"run_id":"run_`, `^ +1 +run:submitted$`, `^ +\d+ +call:done +step:quote:0$`,
		`^ +\d+ +run:complete$`, `^run: +run_[0-9a-f]+$`, `^status: +complete$`)

	// A case run whose prefix diverges: run:error, exit 3, the detail.
	body := fmt.Sprintf(`{"target_name":"checkout","source":{"journal":{"run_id":%q,"fork_after_seq":%d}},"options":{"inputs":{"qty":5}}}`, runID, int(fork))
	r = e.run("run_case", "--body", body, "--follow", "--timeout", "30s", "--format", "table")
	if r.code != 3 || r.stderr != "" {
		t.Fatalf("want exit 3\n%s", r)
	}
	wantLines(t, r, `^ +\d+ +case:outcome +error prefix_diverged$`, `^ +\d+ +run:error +prefix_diverged: prefix call 0 step:quote:0`,
		`^status: +error prefix_diverged$`, `^cause: +step:quote:0$`, `^changed: +inputs$`, `^divergence:$`)
	d := block(r.stdout, "divergence:")
	if !regexp.MustCompile(`(?m)^  call: +step:quote:0 \(seq 0\)$`).MatchString(d) || !regexp.MustCompile(`(?m)^  changed: +\$\.qty$`).MatchString(d) {
		t.Errorf("the divergence's detail\n%s", r)
	}

	// A case run with several changed calls: their roles on the event
	// lines and in the outcome.
	body = fmt.Sprintf(`{"target_name":"checkout","source":{"journal":{"run_id":%q,"fork_after_seq":%d}},"options":{"from_start":true,"inputs":{"qty":5},"allow_write":["step:reserve","step:child:0"]}}`, runID, int(fork))
	r = e.run("run_case", "--body", body, "--follow", "--timeout", "30s", "--format", "table")
	wantOK(t, r)
	wantLines(t, r, `^ +\d+ +case:call +step:quote:0 +changed \(cause\)$`, `^ +\d+ +case:call +step:reserve:0 +changed \(independent\)$`,
		`^ +\d+ +case:call +step:format_receipt:0 +changed \(consequent, caused by step:`, `^ +\d+ +case:outcome +complete$`,
		`^status: +complete$`, `^cause: +step:quote:0$`, `^changes: +step:quote:0 +cause$`, `^ +step:reserve:0 +independent$`,
		`^ +step:child:0 +consequent, caused by step:`, `^changed: +inputs$`, `^calls: +0 prefix call\(s\) verified; \d+ reused, 0 simulated, 0 live, 4 changed; 3 live call\(s\)$`,
		`^cause step:quote:0:$`, `^  changed: +\$\.qty$`)
	if strings.Contains(r.stdout, `"kind"`) {
		t.Errorf("JSON events in the table\n%s", r)
	}
}

// TestCaseListManifest: each line of case list has the manifest's target,
// kind and fork_after_seq (null when only the inputs are kept), sorted by
// hash; an unreadable bundle has its error on its line and does not fail
// the list; --format table shows the same.
func TestCaseListManifest(t *testing.T) {
	t.Parallel()
	f := setup(t)
	inputsOnly := editedSample(t, "checkout-recorded.json", func(b map[string]any) {
		b["manifest"].(map[string]any)["fork_after_seq"] = nil
		b["history"], b["results"] = []any{}, []any{}
	})
	recorded := f.importFile(sampleCase("checkout-recorded.json"))
	want := map[string]string{
		checkoutHash:             `"target":"checkout","kind":"workflow","fork_after_seq":10`,
		agentHash:                `"target":"support_agent","kind":"agent","fork_after_seq":6`,
		recorded:                 `"target":"checkout","kind":"workflow","fork_after_seq":4`,
		f.importFile(inputsOnly): `"target":"checkout","kind":"workflow","fork_after_seq":null`,
	}
	f.importFile(checkoutFile)
	f.importFile(agentFile)

	r := f.run("case", "list")
	wantOK(t, r)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != len(want) {
		t.Fatalf("want %d lines\n%s", len(want), r)
	}
	prev := ""
	for _, line := range lines {
		var l listLine
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatal(err)
		}
		if l.FixtureHash <= prev {
			t.Errorf("not sorted by hash\n%s", r)
		}
		prev = l.FixtureHash
		if !strings.HasSuffix(line, ","+want[l.FixtureHash]+"}") || strings.Contains(line, `"error"`) {
			t.Errorf("line %s, want it to end with %s", line, want[l.FixtureHash])
		}
		if keys := keysOf(t, line); strings.Join(keys, " ") != "fixture_hash size_bytes updated_at target kind fork_after_seq" {
			t.Errorf("keys %v", keys)
		}
	}

	r = f.run("case", "list", "--format", "table")
	wantOK(t, r)
	wantLines(t, r, `^HASH +TARGET +KIND +FORK +SIZE +UPDATED$`,
		`^`+checkoutHash[:12]+` +checkout +workflow +10 +\d+ +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$`,
		`^`+agentHash[:12]+` +support_agent +agent +6 +\d+ +`,
		`^`+recorded[:12]+` +checkout +workflow +4 +`)
	for h, w := range want {
		if strings.HasSuffix(w, "null") {
			wantLines(t, r, `^`+h[:12]+` +checkout +workflow +- +\d+ +`)
		}
	}

	// A damaged blob: its line says why; the others are listed.
	if err := os.WriteFile(f.blobPath(agentHash), []byte("not zstd"), 0o644); err != nil {
		t.Fatal(err)
	}
	r = f.run("case", "list")
	wantOK(t, r)
	var bad map[string]any
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		if strings.Contains(line, agentHash) {
			if err := json.Unmarshal([]byte(line), &bad); err != nil {
				t.Fatal(err)
			}
		} else if strings.Contains(line, `"error"`) || !strings.Contains(line, `"target":"checkout"`) {
			t.Errorf("an intact bundle's line %s", line)
		}
	}
	if e, _ := bad["error"].(string); !strings.HasPrefix(e, "bundle_corrupt: ") || bad["target"] != nil || bad["kind"] != nil || bad["fork_after_seq"] != nil {
		t.Errorf("the damaged bundle's line %v\n%s", bad, r)
	}
	r = f.run("case", "list", "--format", "table")
	wantOK(t, r)
	wantLines(t, r, `^HASH +TARGET +KIND +FORK +SIZE +UPDATED +ERROR$`, `^`+agentHash[:12]+` +- +- +- +8 +\S+ +bundle_corrupt: `)
}
