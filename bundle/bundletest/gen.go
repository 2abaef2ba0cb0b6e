// Package bundletest generates bundles for tests and benchmarks.
package bundletest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
)

// Generate writes a plain-JSON bundle of about size bytes, drawn from seed:
// a workflow run with history events and results of varied JSON (strings
// with non-ASCII and escapes, floats, big integers, nested objects), in
// unsorted order (results before history and manifest, object keys out of
// order). Each history event is the call:done of a call whose result is
// recorded, as in a real capture. The same size and seed give the same bytes.
func Generate(size int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, uint64(size)))
	var b bytes.Buffer
	b.Grow(size + 4096)
	fp := strings.Repeat("ab", 32)
	var keys []string
	b.WriteString(`{"results":[`)
	for i := 0; b.Len() < size*9/10; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		keys = append(keys, fmt.Sprintf("fetch_%d:%d", rng.IntN(1000), i))
		fmt.Fprintf(&b, `{"kind":"step","key":"%s","fingerprint":"%s","result":{"id":%d,"score":%s,"big":%d%d,"name":"Grüße \"%d\"\n","tags":["a","b\u00e9","c"],"nested":{"z":%t,"a":null,"m":[%s,%s]},"text":"%s"}}`,
			keys[i], fp, i, strconv.FormatFloat(rng.Float64()*1e6, 'g', -1, 64),
			rng.Uint64(), rng.Uint64(), i, i%2 == 0,
			strconv.FormatFloat(rng.NormFloat64(), 'g', -1, 64), strconv.FormatFloat(rng.ExpFloat64()*1e-7, 'g', -1, 64),
			strings.Repeat("lorem ipsum dolor sit amet ", 1+rng.IntN(12)))
	}
	b.WriteString(`],"history":[`)
	seq := 0
	for b.Len() < size {
		if seq > 0 {
			b.WriteByte(',')
		}
		seq++
		fmt.Fprintf(&b, `{"run_seq":%d,"kind":"call:done","at":"2026-11-30T10:00:00Z","call":{"kind":"step","key":"%s","fingerprint":"%s","effect":"read"}}`, seq, keys[(seq-1)%len(keys)], fp)
	}
	fmt.Fprintf(&b, `],"manifest":{"format":1,"kind":"workflow","target_name":"bench","code_version":"v1","registration":{"tools":[],"steps":[]},"recorded_config":{},"pyrula_version":"0.1.0","source":{"run_id":"r","namespace":"pyrula","origin":"valkey"},"fork_after_seq":%d,"capture":{"complete":true,"missing":[]},"inputs":{"n":1}}}`, seq)
	return b.Bytes()
}
