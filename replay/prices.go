package replay

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"

	"github.com/pyrula/caseworker/flow"
)

// MaxPriceEntries is the most models a --prices file may name.
const MaxPriceEntries = 100

// Price is what a model costs, in US dollars per million tokens.
type Price struct {
	// InputPerMTok prices uncached prompt tokens.
	InputPerMTok float64 `json:"input_per_mtok"`
	// OutputPerMTok prices answer tokens.
	OutputPerMTok float64 `json:"output_per_mtok"`
	// CacheWritePerMTok prices prompt tokens written to a cache; nil means
	// the input rate.
	CacheWritePerMTok *float64 `json:"cache_write_per_mtok,omitempty"`
	// CacheReadPerMTok prices prompt tokens read from a cache; nil means the
	// input rate.
	CacheReadPerMTok *float64 `json:"cache_read_per_mtok,omitempty"`
	// LongContext, when set, prices a call whose prompt (input + cache
	// creation + cache read tokens) is above AboveInputTokens entirely at
	// its rates.
	LongContext *LongContextPrice `json:"long_context,omitempty"`
}

// LongContextPrice is the long-context tier of a Price.
type LongContextPrice struct {
	// AboveInputTokens is the prompt size above which the tier applies.
	AboveInputTokens int64 `json:"above_input_tokens"`
	// InputPerMTok, OutputPerMTok, CacheWritePerMTok and CacheReadPerMTok
	// are the tier's rates; nil cache rates mean the tier's input rate.
	InputPerMTok      float64  `json:"input_per_mtok"`
	OutputPerMTok     float64  `json:"output_per_mtok"`
	CacheWritePerMTok *float64 `json:"cache_write_per_mtok,omitempty"`
	CacheReadPerMTok  *float64 `json:"cache_read_per_mtok,omitempty"`
}

// Prices maps model ids to their prices.
type Prices map[string]Price

func f64(v float64) *float64 { return &v }

// DefaultPrices is the default price table (USD per million tokens: input,
// output, cache write, cache read). It knows the example agents' local
// models, which cost a token amount so that cost ceilings can be tested,
// and a few hosted models:
//
//	local-support-1     0.10   0.40   0.10   0.01
//	local-policy-1      0.10   0.40   0.10   0.01
//	claude-opus-4-1    15.00  75.00  18.75   1.50
//	claude-sonnet-4-5   3.00  15.00   3.75   0.30  (prompts above 200,000 tokens: 6.00 22.50 7.50 0.60)
//	claude-haiku-4-5    1.00   5.00   1.25   0.10
//	gpt-4o              2.50  10.00   2.50   1.25
//	gpt-4o-mini         0.15   0.60   0.15   0.075
func DefaultPrices() Prices {
	return Prices{
		"local-support-1":   {InputPerMTok: 0.10, OutputPerMTok: 0.40, CacheWritePerMTok: f64(0.10), CacheReadPerMTok: f64(0.01)},
		"local-policy-1":    {InputPerMTok: 0.10, OutputPerMTok: 0.40, CacheWritePerMTok: f64(0.10), CacheReadPerMTok: f64(0.01)},
		"claude-opus-4-1":   {InputPerMTok: 15, OutputPerMTok: 75, CacheWritePerMTok: f64(18.75), CacheReadPerMTok: f64(1.50)},
		"claude-sonnet-4-5": {InputPerMTok: 3, OutputPerMTok: 15, CacheWritePerMTok: f64(3.75), CacheReadPerMTok: f64(0.30), LongContext: &LongContextPrice{AboveInputTokens: 200000, InputPerMTok: 6, OutputPerMTok: 22.5, CacheWritePerMTok: f64(7.5), CacheReadPerMTok: f64(0.60)}},
		"claude-haiku-4-5":  {InputPerMTok: 1, OutputPerMTok: 5, CacheWritePerMTok: f64(1.25), CacheReadPerMTok: f64(0.10)},
		"gpt-4o":            {InputPerMTok: 2.5, OutputPerMTok: 10, CacheWritePerMTok: f64(2.5), CacheReadPerMTok: f64(1.25)},
		"gpt-4o-mini":       {InputPerMTok: 0.15, OutputPerMTok: 0.60, CacheWritePerMTok: f64(0.15), CacheReadPerMTok: f64(0.075)},
	}
}

// ParsePrices reads a --prices file: a JSON object of at most
// MaxPriceEntries model ids, each a Price. Rates must be non-negative and
// input_per_mtok and output_per_mtok are required; unknown fields are
// refused.
func ParsePrices(data []byte) (Prices, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Prices
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("prices: %w", err)
	}
	if p == nil {
		return nil, fmt.Errorf("prices: want a JSON object of model ids")
	}
	if len(p) > MaxPriceEntries {
		return nil, fmt.Errorf("prices: %d models, at most %d", len(p), MaxPriceEntries)
	}
	raw := map[string]map[string]json.RawMessage{}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("prices: %w", err)
	}
	for id, pr := range p {
		if _, ok := raw[id]["input_per_mtok"]; !ok {
			return nil, fmt.Errorf("prices: %s: input_per_mtok is required", id)
		}
		if _, ok := raw[id]["output_per_mtok"]; !ok {
			return nil, fmt.Errorf("prices: %s: output_per_mtok is required", id)
		}
		rates := []*float64{&pr.InputPerMTok, &pr.OutputPerMTok, pr.CacheWritePerMTok, pr.CacheReadPerMTok}
		if lc := pr.LongContext; lc != nil {
			if lc.AboveInputTokens <= 0 {
				return nil, fmt.Errorf("prices: %s: long_context.above_input_tokens must be positive", id)
			}
			rates = append(rates, &lc.InputPerMTok, &lc.OutputPerMTok, lc.CacheWritePerMTok, lc.CacheReadPerMTok)
		}
		for _, r := range rates {
			if r != nil && *r < 0 {
				return nil, fmt.Errorf("prices: %s: rates must not be negative", id)
			}
		}
	}
	return p, nil
}

// Merge returns the default table with p's entries added or replacing.
func (p Prices) Merge(over Prices) Prices {
	out := maps.Clone(p)
	if out == nil {
		out = Prices{}
	}
	maps.Copy(out, over)
	return out
}

// Cost is what a model call with usage u costs at price p, in US dollars.
func (p Price) Cost(u flow.Usage) float64 {
	in, out, cw, cr := p.InputPerMTok, p.OutputPerMTok, p.CacheWritePerMTok, p.CacheReadPerMTok
	prompt := u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens
	if lc := p.LongContext; lc != nil && prompt > lc.AboveInputTokens {
		in, out, cw, cr = lc.InputPerMTok, lc.OutputPerMTok, lc.CacheWritePerMTok, lc.CacheReadPerMTok
	}
	cwr, crr := in, in
	if cw != nil {
		cwr = *cw
	}
	if cr != nil {
		crr = *cr
	}
	return (float64(u.InputTokens)*in + float64(u.OutputTokens)*out +
		float64(u.CacheCreationInputTokens)*cwr + float64(u.CacheReadInputTokens)*crr) / 1e6
}
