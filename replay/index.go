package replay

import (
	"cmp"
	"slices"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/internal/callkeys"
)

// recordIndex finds a recorded result by its call's kind and key. A bundle
// keeps its results in canonical (kind, key) order, and the results of
// calls after the fork their call:start's run_seq: a case run of unchanged
// code makes those calls in that order, so each is found by comparing it
// with the next one expected. A call out of that order (a gather, a call
// the run no longer makes, a call of the prefix) is found in a map built
// on the first such lookup.
type recordIndex struct {
	results []bundle.Result
	order   []int32 // positions of the results with a start_seq, by start_seq
	rank    []int32 // the rank in order of each result, -1 without start_seq
	next    int     // the rank expected next
	byKey   *callkeys.Map[int]
}

// newRecordIndex indexes results.
func newRecordIndex(results []bundle.Result) *recordIndex {
	x := &recordIndex{results: results}
	lo, hi, n := int64(0), int64(0), 0
	for i := range results {
		if s := results[i].StartSeq; s > 0 {
			if n == 0 || s < lo {
				lo = s
			}
			hi = max(hi, s)
			n++
		}
	}
	if n == 0 {
		return x
	}
	x.order = make([]int32, 0, n)
	if span := hi - lo + 1; span <= 8*int64(n)+64 {
		// Run_seqs are dense (a call's start and done, a few other
		// events): place each by its own, in linear time (a third of a
		// sort's time on 10,000 results).
		slots := make([]int32, span)
		for i := range slots {
			slots[i] = -1
		}
		for i := range results {
			if s := results[i].StartSeq; s > 0 {
				slots[s-lo] = int32(i)
			}
		}
		for _, i := range slots {
			if i >= 0 {
				x.order = append(x.order, i)
			}
		}
	} else {
		for i := range results {
			if results[i].StartSeq > 0 {
				x.order = append(x.order, int32(i))
			}
		}
		slices.SortFunc(x.order, func(a, b int32) int {
			return cmp.Compare(results[a].StartSeq, results[b].StartSeq)
		})
	}
	x.rank = make([]int32, len(results))
	for i := range x.rank {
		x.rank[i] = -1
	}
	for r, i := range x.order {
		x.rank[i] = int32(r)
	}
	return x
}

// find returns the position in results of the result of call k, the call
// the case run makes now: the calls recorded after it are expected next.
func (x *recordIndex) find(k callKey) (int, bool) {
	if x.next < len(x.order) {
		i := int(x.order[x.next])
		if r := &x.results[i]; r.Key == k.key && r.Kind == string(k.kind) {
			x.next++
			return i, true
		}
	}
	i, ok := x.lookup(k)
	if ok && x.rank != nil && x.rank[i] >= 0 {
		x.next = int(x.rank[i]) + 1
	}
	return i, ok
}

// nextKey returns the key of the result expected next (find's first
// guess) when it is of that kind, else "".
func (x *recordIndex) nextKey(kind host.CallKind) string {
	if x.next < len(x.order) {
		if r := &x.results[x.order[x.next]]; r.Kind == string(kind) {
			return r.Key
		}
	}
	return ""
}

// lookup returns the position in results of the result of call k, without
// moving the expected order.
func (x *recordIndex) lookup(k callKey) (int, bool) {
	if x.next > 0 {
		// The call found last, asked for again.
		i := int(x.order[x.next-1])
		if r := &x.results[i]; r.Key == k.key && r.Kind == string(k.kind) {
			return i, true
		}
	}
	if x.byKey == nil {
		x.byKey = callkeys.New[int](len(x.results))
		for i, r := range x.results {
			x.byKey.Set(r.Kind, r.Key, i)
		}
	}
	return x.byKey.Get(string(k.kind), k.key)
}
