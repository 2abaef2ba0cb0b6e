package replay

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow/host"
)

// TestRecordIndexFindsEveryResult: whatever order the calls come in (the
// recorded order, shuffled, with calls skipped or made twice, with results
// that have no start_seq or sparse ones), find and lookup return the one
// result of each call and nothing for a call the recording lacks; a run
// that makes its calls in the recorded order never builds the map.
func TestRecordIndexFindsEveryResult(t *testing.T) {
	// Canonical order: kind, then key ("read:10" before "read:2").
	mk := func(n int, seqOf func(i int) int64) []bundle.Result {
		var rs []bundle.Result
		for i := range n {
			rs = append(rs, bundle.Result{Kind: "step", Key: fmt.Sprintf("read:%d", i), StartSeq: seqOf(i)})
		}
		sortResults(rs)
		return rs
	}
	dense := func(i int) int64 { return int64(2*i + 2) }
	cases := []struct {
		name    string
		results []bundle.Result
	}{
		{"dense", mk(300, dense)},
		{"sparse", mk(300, func(i int) int64 { return int64(1000*i + 7) })},
		{"none", mk(300, func(int) int64 { return 0 })},
		{"some", mk(300, func(i int) int64 { return int64(i%3) * dense(i) })},
		{"models and steps", append(mk(50, dense), bundle.Result{Kind: "model", Key: "0", StartSeq: 1})},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pos := map[callKey]int{}
			var byStart []callKey
			for i, r := range tc.results {
				pos[callKey{host.CallKind(r.Kind), r.Key}] = i
			}
			x := newRecordIndex(tc.results)
			for _, i := range x.order {
				r := tc.results[i]
				byStart = append(byStart, callKey{host.CallKind(r.Kind), r.Key})
			}
			check := func(x *recordIndex, k callKey, moving bool) {
				t.Helper()
				var i int
				var ok bool
				if moving {
					i, ok = x.find(k)
				} else {
					i, ok = x.lookup(k)
				}
				want, wantOK := pos[k]
				if ok != wantOK || ok && i != want {
					t.Fatalf("%v: got %d %v, want %d %v", k, i, ok, want, wantOK)
				}
			}
			// The recorded order, each call asked for twice: no map.
			for _, k := range byStart {
				check(x, k, true)
				check(x, k, false)
			}
			if tc.name == "dense" && x.byKey != nil {
				t.Fatal("a run in the recorded order built the map")
			}
			// Shuffled, skipped, repeated and unknown calls.
			rng := rand.New(rand.NewPCG(1, 2))
			for range 3 {
				x := newRecordIndex(tc.results)
				for range 2 * len(tc.results) {
					var k callKey
					switch n := rng.IntN(10); {
					case n == 0:
						k = callKey{host.KindStep, "read:nope"}
					case n < 5 && len(byStart) > 0:
						// Near the recorded order.
						k = byStart[min(len(byStart)-1, x.next+rng.IntN(3))]
					default:
						r := tc.results[rng.IntN(len(tc.results))]
						k = callKey{host.CallKind(r.Kind), r.Key}
					}
					check(x, k, rng.IntN(2) == 0)
				}
			}
		})
	}
}

// sortResults puts results in a bundle's canonical order.
func sortResults(rs []bundle.Result) {
	slices.SortFunc(rs, func(a, b bundle.Result) int { return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Key, b.Key)) })
}
