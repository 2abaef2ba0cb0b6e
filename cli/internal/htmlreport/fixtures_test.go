package htmlreport_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/cli/internal/htmlreport"
)

// The reports of the tests, built from lines shaped as the commands print
// them.

const (
	hashA = "3f5a9c0e1b2d4f6a8c0e1b2d4f6a8c0e1b2d4f6a8c0e1b2d4f6a8c0e1b2d4f6a"
	hashB = "9d8c7b6a5f4e3d2c1b0a9d8c7b6a5f4e3d2c1b0a9d8c7b6a5f4e3d2c1b0a9d8c"
)

// raw is v as JSON (a string is taken as JSON text already).
func raw(t testing.TB, v any) json.RawMessage {
	t.Helper()
	if s, ok := v.(string); ok {
		if !json.Valid([]byte(s)) {
			t.Fatalf("invalid JSON fixture: %s", s)
		}
		return json.RawMessage(s)
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// chargeDivergence is the divergence of step:charge:0: the amount changed
// and a currency was added; with values, both sides.
func chargeDivergence(values bool) string {
	v := ""
	if values {
		v = `,"values":{"$.amount":{"recorded":100,"actual":120},"$.currency":{"actual":"EUR"}}`
	}
	return `{"seq":3,"call":"step:charge:0","recorded_call":"step:charge:0","recorded_fingerprint":"` + hashA + `","actual_fingerprint":"` + hashB + `","role":"cause","diff":{"added":["$.currency"],"removed":[],"changed":["$.amount"],"ignored":["$.ts"]` + v + `}}`
}

// modelChange is the record of a model call whose system prompt, model and
// tools changed.
const modelChange = `{"seq":5,"call":"model:0","recorded_call":"model:0","recorded_fingerprint":"` + hashA + `","actual_fingerprint":"` + hashB + `","role":"independent","no_input":"the model request is compared part by part","model":{"parts":["system","model","tools"],"model":{"recorded":"m1","actual":"m2"},"system_diff":["@@ -1,2 +1,2 @@"," You are a support agent.","-Be terse.","+Be thorough."],"tools":{"added":["refund"],"removed":["escalate"]},"messages":["$.messages[0].content"]}}`

// checkoutTimeline is the timeline of the failing checkout case: verified,
// reused, the first divergence (changed, the cause), a consequent, a changed
// model call and the call that stopped the run.
func checkoutTimeline(t testing.TB, values bool) []htmlreport.Call {
	return []htmlreport.Call{
		{Seq: 1, Call: "step:quote:0", Effect: "read", Provenance: "verified"},
		{Seq: 2, Call: "step:reserve:0", Effect: "write", Provenance: "reused"},
		{Seq: 3, Call: "step:charge:0", Effect: "write", Provenance: "changed", Change: raw(t, chargeDivergence(values))},
		{Seq: 4, Call: "step:format_receipt:0", Effect: "pure", Provenance: "changed",
			Change: raw(t, `{"seq":4,"call":"step:format_receipt:0","role":"consequent","caused_by":"step:charge:0","diff":{"added":[],"removed":[],"changed":["$.total"],"ignored":[]}}`)},
		{Seq: 5, Call: "model:0", Effect: "", Provenance: "changed", Change: raw(t, modelChange)},
		{Seq: 6, Call: "tool:send_email:0", Effect: "write", Provenance: "stopped"},
	}
}

// passLine is a passing case test line.
func passLine(file, target string) string {
	return fmt.Sprintf(`{"type":"case","file":%q,"fixture_hash":%q,"target":%q,"status":"pass","run_status":"complete","code":null,"reason":null,"message":null,"stop_key":null,"divergence":null,"changed_axes":[],"unconsumed_keys":[],"prefix_calls":1,"calls":3,"duration_ms":2}`, file, hashA, target)
}

// failLine is a failing case test line with the divergence d.
func failLine(file, target, code, reason, d string) string {
	return fmt.Sprintf(`{"type":"case","file":%q,"fixture_hash":%q,"target":%q,"status":"fail","run_status":"error","code":%q,"reason":%q,"message":"the run diverged from the recording","stop_key":"step:charge:0","divergence":%s,"changed_axes":["code_version"],"unconsumed_keys":["step:email:0"],"prefix_calls":1,"calls":6,"duration_ms":3}`, file, hashB, target, code, reason, d)
}

// shortTimeline is a three-call timeline of a passing case.
var shortTimeline = []htmlreport.Call{
	{Seq: 1, Call: "step:quote:0", Effect: "read", Provenance: "verified"},
	{Seq: 2, Call: "step:reserve:0", Effect: "write", Provenance: "reused"},
	{Seq: 3, Call: "step:charge:0", Effect: "write", Provenance: "reused"},
}

// caseTestReport is a case test of three cases, the second failing.
func caseTestReport(t testing.TB, values bool) htmlreport.Report {
	return htmlreport.Report{
		Command: "case test",
		Title:   "pyrula case test tests/cases",
		Version: "0.9.0",
		Values:  values,
		Summary: raw(t, `{"type":"summary","cases":3,"passed":2,"failed":1,"errors":0,"duration_ms":12}`),
		Cases: []htmlreport.Case{
			{Line: raw(t, passLine("tests/cases/a.case", "checkout")), Timeline: shortTimeline},
			{Line: raw(t, failLine("tests/cases/b.case", "checkout", "replay_diverged", "input_changed", chargeDivergence(values))), Timeline: checkoutTimeline(t, values)},
			{Line: raw(t, passLine("tests/cases/c.case", "send_receipt")), Timeline: shortTimeline},
		},
	}
}

// bigCaseTestReport is a case test of 1,000 cases: 970 passes and 30
// failures of three signatures (15, 10 and 5 cases), interleaved.
func bigCaseTestReport(t testing.TB) htmlreport.Report {
	quote := `{"seq":1,"call":"step:quote:0","role":"cause","diff":{"added":[],"removed":[],"changed":["$.sku","$.qty"],"ignored":[]}}`
	r := htmlreport.Report{
		Command: "case test",
		Title:   "pyrula case test tests/big",
		Version: "0.9.0",
		Summary: raw(t, `{"type":"summary","cases":1000,"passed":970,"failed":25,"errors":5,"duration_ms":1234}`),
	}
	for i := range 1000 {
		file := fmt.Sprintf("tests/big/case-%04d.case", i)
		var line string
		switch {
		case i%50 == 7 && i < 750: // 15
			line = failLine(file, "checkout", "replay_diverged", "input_changed", chargeDivergence(false))
		case i%50 == 21 && i < 500: // 10
			line = failLine(file, "checkout", "replay_diverged", "input_changed", quote)
		case i%200 == 33: // 5
			line = fmt.Sprintf(`{"type":"case","file":%q,"fixture_hash":null,"target":"triage","status":"error","run_status":null,"code":"budget_exhausted","reason":null,"message":"no live calls allowed","stop_key":"model:0","divergence":null,"changed_axes":[],"unconsumed_keys":[],"prefix_calls":0,"calls":1,"duration_ms":1}`, file)
		default:
			line = passLine(file, "checkout")
		}
		r.Cases = append(r.Cases, htmlreport.Case{Line: raw(t, line), Timeline: shortTimeline})
	}
	return r
}

// longRunReport is a case run whose timeline has n calls: mostly reused,
// one live call in 100, a changed call in 1,000, its first divergence at
// seq firstSeq, and the last call stopped.
func longRunReport(t testing.TB, n, firstSeq int) (r htmlreport.Report, notable int) {
	d := fmt.Sprintf(`{"seq":%d,"call":"step:charge:%d","recorded_call":"step:charge:%d","recorded_fingerprint":%q,"actual_fingerprint":%q,"role":"cause","diff":{"added":["$.currency"],"removed":[],"changed":["$.amount"],"ignored":[]}}`, firstSeq, firstSeq, firstSeq, hashA, hashB)
	outcome := fmt.Sprintf(`{"type":"outcome","run_id":"case_01J9Z","target":"checkout","status":"complete","code":null,"message":null,"stop_key":null,"reason":null,"divergence":%s,"cause":"step:charge:%d","changes":[{"call":"step:charge:%d","seq":%d,"role":"cause"},{"call":"step:format_receipt:0","seq":%d,"role":"consequent","caused_by":"step:charge:%d"}],"changed_axes":["inputs"],"provenance":{"reused":9890,"simulated":0,"live":100,"changed":10},"prefix_calls":0,"changed_calls":["step:charge:%d"],"live_calls":100,"cost_usd":0.0012,"cost_observable":true,"llm_ref":null,"code_version":{"recorded":"v1","current":"v2"},"fixture_hash":%q,"result":{"ok":true,"total":120},"last_seq":%d}`,
		d, firstSeq, firstSeq, firstSeq, firstSeq+1, firstSeq, firstSeq, hashA, n)
	calls := make([]htmlreport.Call, n)
	for i := range calls {
		seq := i + 1
		c := htmlreport.Call{Seq: seq, Call: fmt.Sprintf("step:charge:%d", seq), Effect: "read", Provenance: "reused"}
		switch {
		case seq == firstSeq:
			c.Provenance, c.Change = "changed", raw(t, d)
		case seq == n:
			c.Provenance = "stopped"
		case seq%1000 == 0:
			c.Provenance = "changed"
			c.Change = raw(t, fmt.Sprintf(`{"seq":%d,"call":"step:charge:%d","role":"consequent","caused_by":"step:charge:%d","diff":{"added":[],"removed":[],"changed":["$.total"],"ignored":[]}}`, seq, seq, firstSeq))
		case seq%100 == 0:
			c.Provenance = "live"
		}
		if c.Provenance == "changed" || c.Provenance == "stopped" {
			notable++
		}
		calls[i] = c
	}
	return htmlreport.Report{
		Command: "case run",
		Title:   "pyrula case run 3f5a9c0e1b2d",
		Version: "0.9.0",
		Summary: raw(t, outcome),
		Cases:   []htmlreport.Case{{Line: raw(t, outcome), Timeline: calls}},
	}, notable
}

// compareReport is a case compare of two arms: a model swap that changes
// the answer, costs and tool calls.
func compareReport(t testing.TB) htmlreport.Report {
	arm1 := `{"type":"arm","arm":1,"model":"m1","prompt_file":null,"outcome":{"run_id":"case_a1","target":"support_agent","status":"complete","code":null,"live_calls":3,"cost_usd":0.01,"cost_observable":true,"result":{"refund":false,"amount":100}}}`
	arm2 := `{"type":"arm","arm":2,"model":"m2","prompt_file":"prompts/thorough.txt","outcome":{"run_id":"case_a2","target":"support_agent","status":"complete","code":null,"live_calls":4,"cost_usd":0.02,"cost_observable":true,"result":{"refund":true,"amount":120}}}`
	comparison := `{"type":"comparison","fixture_hash":"` + hashA + `","same_status":true,"same_result":false,"same_calls":false,"arms":[` +
		`{"arm":1,"model":"m1","prompt_file":null,"status":"complete","code":null,"live_calls":3,"cost_usd":0.01,"cost_observable":true,"vs_first":null,` +
		`"vs_recording":{"calls":{"same":4,"added":0,"removed":0,"changed":1},"changes":[{"call":"model:0","kind":"model","key":"0","change":"changed","fields":["fingerprint","result"],"fingerprint":{"a":"` + hashA + `","b":"` + hashB + `"},"role":"cause"}]}},` +
		`{"arm":2,"model":"m2","prompt_file":"prompts/thorough.txt","status":"complete","code":null,"live_calls":4,"cost_usd":0.02,"cost_observable":true,` +
		`"vs_first":{"same_result":false,"result":{"added":[],"removed":[],"changed":["$.refund","$.amount"],"ignored":[]},"calls":{"same":3,"added":1,"removed":0,"changed":2},` +
		`"changes":[{"call":"tool:refund:0","kind":"tool","key":"refund:0","change":"added","fields":[],"role":"consequent","caused_by":"model:0"},{"call":"model:0","kind":"model","key":"0","change":"changed","fields":["input","result"],"input":{"added":[],"removed":[],"changed":["$.model"],"ignored":[]},"role":"cause","model":{"parts":["model"],"model":{"recorded":"m1","actual":"m2"}}}]},` +
		`"vs_recording":{"calls":{"same":2,"added":1,"removed":0,"changed":2},"changes":[]}}]}`
	return htmlreport.Report{
		Command: "case compare",
		Title:   "pyrula case compare 3f5a9c0e1b2d --model m1 --model m2",
		Version: "0.9.0",
		Summary: raw(t, comparison),
		Arms: []htmlreport.Arm{
			{Line: raw(t, arm1), Answer: "{\n  \"amount\": 100,\n  \"refund\": false\n}", ToolCalls: 1,
				Timeline: []htmlreport.Call{{Seq: 1, Call: "model:0", Provenance: "live"}, {Seq: 2, Call: "tool:lookup_order:0", Effect: "read", Provenance: "reused"}}},
			{Line: raw(t, arm2), Answer: "{\n  \"amount\": 120,\n  \"refund\": true\n}", ToolCalls: 2,
				AnswerDiff: []string{"@@ -1,4 +1,4 @@", " {", "-  \"amount\": 100,", "-  \"refund\": false", "+  \"amount\": 120,", "+  \"refund\": true", " }"},
				Timeline:   []htmlreport.Call{{Seq: 1, Call: "model:0", Provenance: "live"}, {Seq: 2, Call: "tool:lookup_order:0", Effect: "read", Provenance: "reused"}, {Seq: 3, Call: "tool:refund:0", Effect: "write", Provenance: "live"}}},
		},
	}
}

// diffReport is a case diff of two cases whose inputs differ.
func diffReport(t testing.TB) htmlreport.Report {
	manifest := `{"type":"manifest","fixture_hash":{"a":"` + hashA + `","b":"` + hashB + `"},"changed":["inputs","code_version"],"target_name":{"a":"checkout","b":"checkout"},"kind":{"a":"workflow","b":"workflow"},"code_version":{"a":"v1","b":"v2"},"model":{"a":null,"b":null},"fork_after_seq":{"a":1,"b":1},"inputs":{"added":[],"removed":[],"changed":["$.qty"],"ignored":[],"values":{"$.qty":{"a":2,"b":5}}},"registration":{"a":{"effects":["read"]},"b":{"effects":["read"]}}}`
	calls := []string{
		`{"type":"call","call":"step:quote:0","kind":"step","key":"quote:0","change":"changed","fields":["fingerprint","input","result"],"fingerprint":{"a":"` + hashA + `","b":"` + hashB + `"},"outcome":{"a":"result","b":"result"},"input":{"added":[],"removed":[],"changed":["$.qty"],"ignored":[],"values":{"$.qty":{"a":2,"b":5}}},"result":{"added":[],"removed":[],"changed":["$.total"],"ignored":[],"values":{"$.total":{"a":20,"b":50}}},"role":"cause"}`,
		`{"type":"call","call":"step:format_receipt:0","kind":"step","key":"format_receipt:0","change":"removed","fields":[],"outcome":{"a":"result","b":null},"value":{"a":"receipt #1","b":null},"role":"consequent","caused_by":"step:quote:0"}`,
		`{"type":"call","call":"model:0","kind":"model","key":"0","change":"added","fields":[],"role":"independent","model":{"parts":["system"],"system_diff":["-Be terse.","+Be thorough."]}}`,
	}
	r := htmlreport.Report{
		Command: "case diff",
		Title:   "pyrula case diff 3f5a9c0e1b2d 9d8c7b6a5f4e",
		Version: "0.9.0",
		Values:  true,
		Summary: raw(t, `{"type":"summary","identical":false,"fixture_hash":{"a":"`+hashA+`","b":"`+hashB+`"},"manifest_changed":["inputs","code_version"],"calls":{"same":2,"added":1,"removed":1,"changed":1}}`),
		Diff:    &htmlreport.Diff{Manifest: raw(t, manifest)},
	}
	for _, c := range calls {
		r.Diff.Calls = append(r.Diff.Calls, raw(t, c))
	}
	return r
}

// hostile strings: markup that must show as text and run nothing.
const (
	scriptBreak = `</script><script>alert(1)</script>`
	imgOnerror  = `<img src=x onerror="alert(2);window.pwned=1">`
)

// hostileReport puts hostile strings everywhere a bundle's strings go.
func hostileReport(t testing.TB) htmlreport.Report {
	s := func(v string) string { b, _ := json.Marshal(v); return string(b) }
	path := "$.note" + imgOnerror
	d := `{"seq":2,"call":` + s("step:"+scriptBreak+":0") + `,"role":"cause","caused_by":` + s(imgOnerror) + `,"no_input":` + s(scriptBreak) +
		`,"diff":{"added":[` + s(path) + `],"removed":[],"changed":[` + s(scriptBreak) + `],"ignored":[],"values":{` + s(path) + `:{"actual":` + s(imgOnerror+"\u2028"+scriptBreak) + `}}},` +
		`"model":{"parts":[` + s(scriptBreak) + `],"model":{"recorded":` + s(imgOnerror) + `,"actual":"m2"},"system_diff":[` + s("+"+scriptBreak) + `,` + s("-"+imgOnerror) + `],"tools":{"added":[` + s(imgOnerror) + `],"removed":[]},"messages":[` + s(path) + `]}}`
	line := `{"type":"case","file":` + s("tests/"+scriptBreak+".case") + `,"fixture_hash":null,"target":` + s(imgOnerror) + `,"status":"fail","run_status":"error","code":"replay_diverged","reason":` + s(scriptBreak) +
		`,"message":` + s("boom "+scriptBreak+" "+imgOnerror+" <!-- <b>bold</b>") + `,"stop_key":` + s(imgOnerror) + `,"divergence":` + d + `,"changed_axes":[],"unconsumed_keys":[` + s(scriptBreak) + `],"prefix_calls":0,"calls":2,"duration_ms":1}`
	return htmlreport.Report{
		Command: "case test",
		Title:   "pyrula case test " + scriptBreak + imgOnerror,
		Version: imgOnerror,
		Values:  true,
		Summary: raw(t, `{"type":"summary","cases":1,"passed":0,"failed":1,"errors":0,"duration_ms":1}`),
		Cases: []htmlreport.Case{{Line: raw(t, line), Timeline: []htmlreport.Call{
			{Seq: 1, Call: "step:" + imgOnerror + ":0", Effect: scriptBreak, Provenance: imgOnerror},
			{Seq: 2, Call: "step:" + scriptBreak + ":0", Effect: "write", Provenance: "changed", Change: raw(t, d)},
		}}},
	}
}

// containsAll reports the wants that text lacks.
func missing(text string, wants ...string) []string {
	var out []string
	for _, w := range wants {
		if !strings.Contains(text, w) {
			out = append(out, w)
		}
	}
	return out
}

// suiteReport is a suite of 3 cases × 2 arms: the second arm fails two
// cases at step:charge:0 ($.amount changed, $.currency added), the first
// example child's outcome and timeline read, the second's gone; one child
// skipped by fail_fast; a budget; assertions on the second arm.
func suiteReport(t testing.TB) htmlreport.Report {
	plan := `{"kind":"suite:plan","run_seq":2,"type":"suite_plan","suite_id":"suite_1","target":"checkout","source":"journal","cases":["run_a","run_b","run_c"],` +
		`"arms":["as-recorded","eur"],"asserts":[[],[{"path":"$.currency","equals":"EUR"},{"max_cost_usd":0.5}]],"total":6,"min_cases":1,"fail_fast":true}`
	outcome := `{"kind":"suite:outcome","run_seq":9,"type":"suite_outcome","suite_id":"suite_1","target":"checkout","status":"fail","code":"suite_failed",` +
		`"message":"2 of 6 children did not pass","cases":3,"total":6,"by_status":{"pass":3,"fail":2,"error":0,"skipped":1},` +
		`"groups":[{"verdict":"fail","code":"replay_diverged","reason":"input_changed","call":"step:charge:0","changed":["$.amount"],"added":["$.currency"],"removed":[],"count":2,"arms":["eur"],` +
		`"examples":[{"case":"` + hashA + `","arm":"eur","run_id":"suite_1:eur:run_a"},{"case":"` + hashB + `","arm":"eur","run_id":"suite_1:eur:run_b"}],"message":"the run diverged from the recording"}],` +
		`"arms":[{"name":"as-recorded","passed":3,"failed":0,"errors":0,"skipped":0,"cost_usd":0,"live_calls":0,"prefix_calls":3,"provenance":{"reused":15}},` +
		`{"name":"eur","passed":0,"failed":2,"errors":0,"skipped":1,"cost_usd":0.25,"live_calls":4,"prefix_calls":2,"provenance":{"reused":6,"changed":2,"live":4}}],` +
		`"arm_diffs":[{"arm":"eur","against":"as-recorded","differ":2,"cases":["` + hashA + `","` + hashB + `"],"cost_delta_usd":0.25}],` +
		`"cost_usd":0.25,"live_calls":4,"duration_ms":1234,"budget":{"max_cost_usd":2,"max_live_calls":null,"live_calls":4,"spent_usd":0.25,"unsettled_usd":0}}`
	child := `{"kind":"case:outcome","run_seq":14,"type":"outcome","run_id":"suite_1:eur:run_a","target":"checkout","status":"error","code":"replay_diverged","reason":"input_changed",` +
		`"message":"the run diverged from the recording","stop_key":"step:charge:0","divergence":` + chargeDivergence(false) + `,"changes":[],"changed_axes":["inputs"],` +
		`"provenance":{"reused":2},"prefix_calls":1,"changed_calls":[],"live_calls":0,"cost_usd":0,"cost_observable":true,"llm_ref":null,"code_version":{"recorded":"v1","current":"v2"},"fixture_hash":"` + hashA + `","last_seq":14}`
	return htmlreport.Report{
		Command: htmlreport.CommandSuite,
		Title:   "pyrula enqueue run_suite suite_1",
		Version: "0.9.0",
		Summary: raw(t, outcome),
		Plan:    raw(t, plan),
		Cases:   []htmlreport.Case{{Line: raw(t, child), Timeline: checkoutTimeline(t, false)[:3]}},
	}
}
