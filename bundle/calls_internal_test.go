package bundle

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/messages"
)

// TestCheckCallsHashCollisions runs the call checks with every call
// identity hashing alike, so that the lookups walk the chains of slots that
// share a hash: the verdicts are those of distinct hashes.
func TestCheckCallsHashCollisions(t *testing.T) {
	defer func(m uint64) { callIDHashMask = m }(callIDHashMask)
	fp := func(i int) string { return fmt.Sprintf("%064x", i) }
	// Calls step:a:0 … step:a:4, each started and done, with results
	// recorded for all but excluded, and fingerprints off for wrong.
	build := func(excluded, wrong int) string {
		var hist, res []string
		seq := 0
		for i := range 5 {
			call := fmt.Sprintf(`{"effect":"read","fingerprint":%q,"key":"a:%d","kind":"step"}`, fp(i), i)
			for _, kind := range []string{"call:start", "call:done"} {
				seq++
				hist = append(hist, fmt.Sprintf(`{"call":%s,"kind":%q,"run_seq":%d}`, call, kind, seq))
			}
			if i == excluded {
				continue
			}
			f := fp(i)
			if i == wrong {
				f = fp(99)
			}
			res = append(res, fmt.Sprintf(`{"fingerprint":%q,"key":"a:%d","kind":"step","result":%d}`, f, i, i))
		}
		// A result of another kind with the same key as a call.
		res = append(res, fmt.Sprintf(`{"fingerprint":%q,"key":"a:0","kind":"tool","result":0}`, fp(7)))
		return `{"history":[` + strings.Join(hist, ",") + `],"manifest":{"capture":{"complete":true,"missing":[]},"code_version":"v1","fork_after_seq":` +
			fmt.Sprint(seq) + `,"format":1,"inputs":{},"kind":"workflow","pyrula_version":"0","recorded_config":{},"registration":{"steps":[],"tools":[]},` +
			`"source":{"namespace":"pyrula","origin":"valkey","run_id":"r"},"target_name":"t"},"results":[` + strings.Join(res, ",") + `]}`
	}
	for _, mask := range []uint64{^uint64(0), 0} {
		callIDHashMask = mask
		if _, err := Read(bytes.NewReader([]byte(build(-1, -1))), Options{}); err != nil {
			t.Fatalf("mask %x: consistent bundle: %v", mask, err)
		}
		_, err := Read(bytes.NewReader([]byte(build(3, -1))), Options{})
		if code, _ := messages.CodeOf(err); code != messages.BundleCorrupt ||
			!strings.Contains(err.Error(), "history[7] (run_seq 8): call:done of step:a:3 has no recorded result") {
			t.Fatalf("mask %x: a done without result: %v", mask, err)
		}
		_, err = Read(bytes.NewReader([]byte(build(-1, 2))), Options{})
		if code, _ := messages.CodeOf(err); code != messages.BundleCorrupt ||
			!strings.Contains(err.Error(), "history[4] (run_seq 5): call:start of step:a:2 has fingerprint "+fp(2)+", but its result has "+fp(99)) {
			t.Fatalf("mask %x: a fingerprint that differs: %v", mask, err)
		}
	}
}
