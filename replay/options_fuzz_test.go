package replay_test

import (
	"bytes"
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/replay"
)

// FuzzParseSupply: a --supply file (or a run_case message's options.supply)
// never panics the parser; what it accepts is within the documented limits
// (at most 64 KiB, at most 200 calls and 200 tools, each answer valid JSON)
// and reads back the same once encoded.
//
//	go test -run '^$' -fuzz FuzzParseSupply -fuzztime 30s ./replay/
func FuzzParseSupply(f *testing.F) {
	for _, s := range []string{
		`{"calls":{"model:step:quote:0":{"content":"ok"}},"tools":{"refund":{"ok":true}}}`,
		`{"calls":{},"tools":{}}`,
		`{"calls":{"a:1":1,"a:1":2}}`,
		`{"CALLS":{"x":null},"Tools":{"t":[1,2,{"a":"<&>"}]}}`,
		`{"calls":{},"other":1}`,
		`{"calls":{}} {"tools":{}}`,
		`null`, `[]`, `{}`, ``, `{"calls":{"\ud800":"\u00e9"}}`,
		`{"tools":{"t":` + strings.Repeat("[", 40) + strings.Repeat("]", 40) + `}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := replay.ParseSupply(data)
		if err != nil {
			return
		}
		switch {
		case len(data) > replay.MaxSupplyBytes:
			t.Fatalf("accepted %d bytes, over %d", len(data), replay.MaxSupplyBytes)
		case len(s.Calls) > replay.MaxSupplyEntries || len(s.Tools) > replay.MaxSupplyEntries:
			t.Fatalf("accepted %d calls and %d tools, over %d", len(s.Calls), len(s.Tools), replay.MaxSupplyEntries)
		}
		for _, m := range []map[string]json.RawMessage{s.Calls, s.Tools} {
			for k, v := range m {
				if !json.Valid(v) {
					t.Fatalf("answer %q is not valid JSON: %q", k, v)
				}
			}
		}
		enc, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("an accepted supply does not encode: %v", err)
		}
		if len(enc) > replay.MaxSupplyBytes {
			return // encoding escapes <, > and & and replaces bad UTF-8: it may grow past the limit
		}
		again, err := replay.ParseSupply(enc)
		if err != nil {
			t.Fatalf("the encoded supply %s is refused: %v", enc, err)
		}
		if enc2, _ := json.Marshal(again); !bytes.Equal(enc, enc2) {
			t.Fatalf("supply does not read back:\n%s\n%s", enc, enc2)
		}
	})
}

// FuzzParsePrices: a --prices file (or a run_case message's options.prices)
// never panics the parser; what it accepts names at most 100 models, every
// rate is a non-negative number, a long-context tier starts above a
// positive prompt size, and the table reads back the same once encoded.
//
//	go test -run '^$' -fuzz FuzzParsePrices -fuzztime 30s ./replay/
func FuzzParsePrices(f *testing.F) {
	for _, s := range []string{
		`{"m":{"input_per_mtok":1,"output_per_mtok":2,"long_context":{"above_input_tokens":100,"input_per_mtok":10,"output_per_mtok":20}}}`,
		`{"m":{"input_per_mtok":0.1,"output_per_mtok":0.4,"cache_write_per_mtok":0.125,"cache_read_per_mtok":0.01}}`,
		`{"m":{"input_per_mtok":1}}`,
		`{"m":{"input_per_mtok":-1,"output_per_mtok":1}}`,
		`{"m":{"input_per_mtok":1,"output_per_mtok":1,"INPUT_PER_MTOK":-1}}`,
		`{"m":{"input_per_mtok":1,"output_per_mtok":1,"x":1}}`,
		`{"m":{"input_per_mtok":1,"output_per_mtok":1,"long_context":{"above_input_tokens":0,"input_per_mtok":1,"output_per_mtok":1}}}`,
		`{"m":{"input_per_mtok":1,"output_per_mtok":1,"long_context":{"above_input_tokens":1,"input_per_mtok":1,"output_per_mtok":1,"cache_read_per_mtok":-0.5}}}`,
		`{"m":{"input_per_mtok":1e308,"output_per_mtok":-0}}`,
		`{"m":{"input_per_mtok":1,"output_per_mtok":1},"m":null}`,
		`{"m":{"input_per_mtok":1,"output_per_mtok":1}} x`,
		`null`, `[]`, `{}`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := replay.ParsePrices(data)
		if err != nil {
			return
		}
		if p == nil || len(p) > replay.MaxPriceEntries {
			t.Fatalf("accepted %d models (nil %v), at most %d", len(p), p == nil, replay.MaxPriceEntries)
		}
		for id, pr := range p {
			rates := []*float64{&pr.InputPerMTok, &pr.OutputPerMTok, pr.CacheWritePerMTok, pr.CacheReadPerMTok}
			if lc := pr.LongContext; lc != nil {
				if lc.AboveInputTokens <= 0 {
					t.Fatalf("%q: long_context.above_input_tokens %d accepted", id, lc.AboveInputTokens)
				}
				rates = append(rates, &lc.InputPerMTok, &lc.OutputPerMTok, lc.CacheWritePerMTok, lc.CacheReadPerMTok)
			}
			for _, r := range rates {
				if r != nil && (*r < 0 || math.IsNaN(*r) || math.IsInf(*r, 0)) {
					t.Fatalf("%q: rate %v accepted", id, *r)
				}
			}
		}
		enc, err := json.Marshal(p)
		if err != nil {
			t.Fatalf("accepted prices do not encode: %v", err)
		}
		again, err := replay.ParsePrices(enc)
		if err != nil {
			t.Fatalf("the encoded prices %s are refused: %v", enc, err)
		}
		if !reflect.DeepEqual(p, again) {
			t.Fatalf("prices do not read back:\n%+v\n%+v", p, again)
		}
	})
}
