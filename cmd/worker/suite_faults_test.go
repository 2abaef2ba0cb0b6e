package main_test

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
)

// suiteReport is what must not change when a worker dies mid-suite: the
// suite's totals, groups (without their example run ids, which name the
// suite) and arms.
type suiteReport struct {
	Status   string         `json:"status"`
	Code     string         `json:"code"`
	Total    int            `json:"total"`
	ByStatus map[string]int `json:"by_status"`
	Groups   []struct {
		Verdict string   `json:"verdict"`
		Code    string   `json:"code"`
		Call    string   `json:"call"`
		Changed []string `json:"changed"`
		Count   int      `json:"count"`
		Arms    []string `json:"arms"`
	} `json:"groups"`
	Arms []struct {
		Name       string         `json:"name"`
		Passed     int            `json:"passed"`
		Failed     int            `json:"failed"`
		Errors     int            `json:"errors"`
		LiveCalls  int            `json:"live_calls"`
		Provenance map[string]int `json:"provenance"`
	} `json:"arms"`
}

// runSuite sends a shadow suite of the checkout runs in the journal (two
// arms: as recorded, and with qty 5) and returns its id.
func runSuite(t *testing.T, c valkey.Client, ns, id string) string {
	t.Helper()
	sendAll(t, c, ns+":case-messages", []any{envelope{MessageID: id, Type: "run_suite", Body: map[string]any{
		"target_name": "checkout", "cases": map[string]any{"journal": map[string]any{}},
		"arms": []map[string]any{
			{"name": "as-recorded", "options": map[string]any{"replay_only": true}},
			{"name": "qty5", "options": map[string]any{"replay_only": true, "inputs": map[string]any{"qty": 5}}},
		}}}})
	var suiteID string
	testwait.Eventually(t, 20*time.Second, "the reply to "+id, func() bool {
		for _, raw := range allReplies(t, c, ns+":case-replies")[id] {
			var r reply
			if json.Unmarshal([]byte(raw), &r) == nil && r.Status == "ok" {
				var res struct {
					SuiteID string `json:"suite_id"`
				}
				json.Unmarshal(r.Result, &res)
				suiteID = res.SuiteID
			}
		}
		return suiteID != ""
	})
	return suiteID
}

// suiteOutcome reads the suite:outcome of suite id.
func suiteOutcome(t *testing.T, c valkey.Client, ns, id string) suiteReport {
	t.Helper()
	key := ns + ":{" + id + "}:events"
	entries, err := c.Do(t.Context(), c.B().Xrange().Key(key).Start("-").End("+").Build()).AsXRange()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if raw := e.FieldValues["event"]; strings.Contains(raw, `"kind":"suite:outcome"`) {
			var r suiteReport
			if err := json.Unmarshal([]byte(raw), &r); err != nil {
				t.Fatal(err)
			}
			return r
		}
	}
	t.Fatalf("suite %s has no suite:outcome", id)
	return suiteReport{}
}

// TestSIGKILLMidSuite: a worker executing a shadow suite's children is
// killed once the suite is planned; the other worker reclaims its runs and
// the suite ends with the same report as the same suite run without a
// kill, each child ending once.
func TestSIGKILLMidSuite(t *testing.T) {
	url := testenv.ValkeyURL(t)
	ns := testenv.UniqueName(t, "wsuite")
	client := testenv.ValkeyClientAt(t, url, ns)
	env := []string{"PYRULA_FIXTURE_STORE=memory:", "PYRULA_CLAIM_IDLE=500ms", "PYRULA_RUN_LEASE=2s", "PYRULA_RUN_CONCURRENCY=2"}
	a := startReady(t, workerEnv(url, ns, "a", env...)...)
	startReady(t, workerEnv(url, ns, "b", env...)...)
	const recorded = 40
	var msgs []any
	for i := range recorded {
		msgs = append(msgs, checkoutRun(fmt.Sprintf("rec-%d", i), 0))
	}
	sendAll(t, client, ns+":case-messages", msgs)
	got, _ := readReplies(t, client, ns+":case-replies", "0", recorded, 30*time.Second)
	var runs []string
	for _, r := range got {
		runs = append(runs, runResultID(r))
	}
	waitRunsFinished(t, client, ns, runs, 60*time.Second)

	base := runSuite(t, client, ns, "suite-base")
	waitRunsFinished(t, client, ns, []string{base}, 60*time.Second)
	want := suiteOutcome(t, client, ns, base)
	if want.Total != 2*recorded || want.ByStatus["pass"] != recorded || len(want.Groups) == 0 {
		t.Fatalf("the suite without a kill: %+v", want)
	}

	killed := runSuite(t, client, ns, "suite-killed")
	testwait.Eventually(t, 20*time.Second, "the suite planned", func() bool {
		return readJournal(t, client, ns, killed).count("suite:plan") == 1
	})
	if ended := len(readJournal(t, client, ns, killed).terminal()); ended != 0 {
		t.Fatal("the suite ended before the kill: nothing was killed mid-suite")
	}
	a.sigkill()
	start := time.Now()
	waitRunsFinished(t, client, ns, []string{killed}, 90*time.Second)
	t.Logf("worker a killed once the suite was planned; the suite ended %v later", time.Since(start).Round(time.Millisecond))
	if got := suiteOutcome(t, client, ns, killed); !reflect.DeepEqual(got, want) {
		t.Fatalf("after a SIGKILL the suite reports\n%+v\nwithout one\n%+v", got, want)
	}
	var children []string
	for arm := range 2 {
		for c := range recorded {
			children = append(children, fmt.Sprintf("%s:%d:%d", killed, arm, c))
		}
	}
	for _, id := range children {
		if j := readJournal(t, client, ns, id); j.count("case:outcome") != 1 || len(j.terminal()) != 1 {
			t.Errorf("child %s has %d case:outcome and %d terminal events, want one each\n%s", id, j.count("case:outcome"), len(j.terminal()), j)
		}
	}
	if n := readJournal(t, client, ns, killed).count("suite:outcome"); n != 1 {
		t.Errorf("the suite has %d suite:outcome events, want 1", n)
	}
}
