package explain_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/pyrula/caseworker/explain"
)

func TestLineDiff(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		a, b string
		want []string
	}{
		{"equal", "a\nb", "a\nb", nil},
		{"one line added", "a\nb\nc", "a\nb\nx\nc", []string{"@@ -1,3 +1,4 @@", " a", " b", "+x", " c"}},
		{"one line changed", "only", "other", []string{"@@ -1,1 +1,1 @@", "-only", "+other"}},
		{"far apart", "1\n2\n3\n4\n5\n6\n7\n8\n9", "0\n2\n3\n4\n5\n6\n7\n8\n10", []string{
			"@@ -1,3 +1,3 @@", "-1", "+0", " 2", " 3",
			"@@ -7,3 +7,3 @@", " 7", " 8", "-9", "+10"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := explain.LineDiff(tc.a, tc.b); !slices.Equal(got, tc.want) {
				t.Errorf("LineDiff = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestModel(t *testing.T) {
	t.Parallel()
	rec := json.RawMessage(`{"model":"m1","system":"Be terse.\nHelp.","tools":["lookup"],"messages":[{"role":"user","content":"hi"}]}`)
	act := json.RawMessage(`{"model":"m2","system":"Be thorough.\nHelp.","tools":["lookup","refund"],"messages":[{"role":"user","content":"hello"}]}`)
	m := explain.Model(rec, act, []string{"$.messages[0].content", "$.model", "$.system", "$.tools[1]"})
	if m == nil || !slices.Equal(m.Parts, []string{"model", "system", "tools", "messages"}) ||
		*m.Model != (explain.Pair{Recorded: "m1", Actual: "m2"}) ||
		!slices.Equal(m.SystemDiff, []string{"@@ -1,2 +1,2 @@", "-Be terse.", "+Be thorough.", " Help."}) ||
		!slices.Equal(m.Tools.Added, []string{"refund"}) || len(m.Tools.Removed) != 0 ||
		!slices.Equal(m.Messages, []string{"$.messages[0].content"}) {
		t.Fatalf("Model = %+v", m)
	}
	want := "the model changed (m1 → m2); the system prompt changed (1 line(s) removed, 1 added); the tool list changed (added [refund], removed []); the messages changed at $.messages[0].content"
	if got := m.Summary(); got != want {
		t.Errorf("Summary = %q\nwant      %q", got, want)
	}
	// Only the paths given count: a system prompt that differs in what
	// volatile rules remove is not listed.
	if m := explain.Model(rec, act, []string{"$.messages[0].content"}); !slices.Equal(m.Parts, []string{"messages"}) || m.SystemDiff != nil {
		t.Errorf("Model with messages only = %+v", m)
	}
	if explain.Model(json.RawMessage(`[1]`), act, nil) != nil {
		t.Error("Model of an input that is not a model call's: want nil")
	}
}

func TestTracker(t *testing.T) {
	t.Parallel()
	var tr explain.Tracker
	steps := []struct {
		call explain.Call
		want explain.Role
	}{
		// The input changed qty; the quote's total is new.
		{explain.Call{ID: "step:quote:0", RecordedInput: raw(`{"qty":2}`), Input: raw(`{"qty":5}`),
			RecordedResult: raw(`{"total":3998,"unit":1999}`), Result: raw(`{"total":9995,"unit":1999}`)},
			explain.Role{Role: explain.Cause}},
		// qty came from the inputs too: not the quote's doing.
		{explain.Call{ID: "step:reserve:0", RecordedInput: raw(`{"qty":2}`), Input: raw(`{"qty":5}`),
			RecordedResult: raw(`"rsv_1"`), Result: raw(`"rsv_1"`)},
			explain.Role{Role: explain.Independent}},
		// Carries the quote's new total.
		{explain.Call{ID: "step:receipt:0", RecordedInput: raw(`{"qty":2,"total":3998}`), Input: raw(`{"qty":5,"total":9995}`),
			RecordedResult: raw(`"5 x: 39.98 EUR, thank you"`), Result: raw(`"5 x: 99.95 EUR, thank you"`)},
			explain.Role{Role: explain.Consequent, CausedBy: "step:quote:0"}},
		// Its input quotes the receipt's new text inside a longer string.
		{explain.Call{ID: "step:email:0", RecordedInput: raw(`{"body":"Hello. 5 x: 39.98 EUR, thank you"}`),
			Input: raw(`{"body":"Hello. 5 x: 99.95 EUR, thank you"}`)},
			explain.Role{Role: explain.Consequent, CausedBy: "step:receipt:0"}},
		// No recorded input: every value of its input counts; true never.
		{explain.Call{ID: "step:audit:0", Input: raw(`{"ok":true,"n":0}`)},
			explain.Role{Role: explain.Independent}},
	}
	for _, s := range steps {
		if got := tr.Add(s.call); got != s.want {
			t.Errorf("%s: role %+v, want %+v", s.call.ID, got, s.want)
		}
	}
}

func raw(s string) json.RawMessage { return json.RawMessage(s) }
