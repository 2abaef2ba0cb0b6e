package replay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"

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

// PricesAsOf is the date the hosted models' rows of DefaultPrices were
// checked against the providers' published prices (docs/models.md gives each
// row's source).
const PricesAsOf = "2026-12-03"

// DefaultPrices is the default price table, in US dollars per million
// tokens: input, output, cache write, cache read, and for some models a
// long-context tier that prices a whole call whose prompt is above a
// threshold. It knows the example agents' local models (they cost a token
// amount so that cost ceilings can be tested) and the current Anthropic and
// OpenAI models as published on PricesAsOf. --prices adds or replaces rows.
func DefaultPrices() Prices {
	lc := func(above int64, in, out, cw, cr float64) *LongContextPrice {
		return &LongContextPrice{AboveInputTokens: above, InputPerMTok: in, OutputPerMTok: out, CacheWritePerMTok: f64(cw), CacheReadPerMTok: f64(cr)}
	}
	row := func(in, out, cw, cr float64) Price {
		return Price{InputPerMTok: in, OutputPerMTok: out, CacheWritePerMTok: f64(cw), CacheReadPerMTok: f64(cr)}
	}
	withLC := func(p Price, l *LongContextPrice) Price { p.LongContext = l; return p }
	return Prices{
		// The example agents' scripted local models.
		"local-support-1": row(0.10, 0.40, 0.10, 0.01),
		"local-policy-1":  row(0.10, 0.40, 0.10, 0.01),
		// Anthropic (Messages API; cache write = the 5-minute write rate).
		"claude-fable-5-1":  row(10, 50, 12.50, 0.25),
		"claude-opus-5-5":   row(4, 20, 5, 0.20),
		"claude-opus-5":     row(5, 25, 6.25, 0.50),
		"claude-sonnet-5-5": row(2, 10, 2.50, 0.10),
		"claude-sonnet-5":   row(2, 10, 2.50, 0.20),
		"claude-haiku-5-5":  withLC(row(0.10, 0.50, 0.125, 0.01), lc(100000, 0.50, 2.50, 0.625, 0.05)),
		"claude-opus-4-5":   row(5, 25, 6.25, 0.50),
		"claude-opus-4-1":   row(15, 75, 18.75, 1.50),
		"claude-sonnet-4-6": withLC(row(3, 15, 3.75, 0.30), lc(200000, 6, 22.50, 7.50, 0.60)),
		"claude-sonnet-4-5": withLC(row(3, 15, 3.75, 0.30), lc(200000, 6, 22.50, 7.50, 0.60)),
		"claude-haiku-4-5":  row(1, 5, 1.25, 0.10),
		// OpenAI (Chat Completions; prompt caching is automatic and writes
		// cost the input rate).
		"gpt-5.5":      withLC(row(5, 30, 5, 0.50), lc(272000, 10, 45, 10, 1)),
		"gpt-5.4":      row(2.50, 15, 2.50, 0.25),
		"gpt-5.4-mini": row(0.75, 4.50, 0.75, 0.075),
		"gpt-5.4-nano": row(0.20, 1.25, 0.20, 0.02),
		"gpt-4o":       row(2.50, 10, 2.50, 1.25),
		"gpt-4o-mini":  row(0.15, 0.60, 0.15, 0.075),
	}
}

// MaxRatePerMTok is the highest rate a --prices file may give, in US
// dollars per million tokens (a dollar a token): far above any published
// price, and low enough that no sum of costs overflows to infinity.
const MaxRatePerMTok = 1e6

// ParsePrices reads a --prices file: a JSON object of at most
// MaxPriceEntries model ids, each a Price. Rates must be finite numbers from
// 0 to MaxRatePerMTok (a number too large for a float64, such as 1e400, is
// refused rather than read as infinity) and input_per_mtok and
// output_per_mtok are required; unknown fields are refused.
func ParsePrices(data []byte) (Prices, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var p Prices
	if err := dec.Decode(&p); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && strings.HasPrefix(te.Value, "number ") {
			n := strings.TrimPrefix(te.Value, "number ")
			if te.Type != nil && te.Type.Kind() == reflect.Float64 {
				return nil, fmt.Errorf("prices: %s %s is not a finite number (a rate is at most %g)", te.Field, n, MaxRatePerMTok)
			}
			return nil, fmt.Errorf("prices: %s %s is not a valid %s", te.Field, n, te.Type)
		}
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
	for _, id := range slices.Sorted(maps.Keys(p)) {
		pr := p[id]
		if _, ok := raw[id]["input_per_mtok"]; !ok {
			return nil, fmt.Errorf("prices: %s: input_per_mtok is required", id)
		}
		if _, ok := raw[id]["output_per_mtok"]; !ok {
			return nil, fmt.Errorf("prices: %s: output_per_mtok is required", id)
		}
		type rate struct {
			name string
			v    *float64
		}
		rates := []rate{{"input_per_mtok", &pr.InputPerMTok}, {"output_per_mtok", &pr.OutputPerMTok},
			{"cache_write_per_mtok", pr.CacheWritePerMTok}, {"cache_read_per_mtok", pr.CacheReadPerMTok}}
		if lc := pr.LongContext; lc != nil {
			if lc.AboveInputTokens <= 0 {
				return nil, fmt.Errorf("prices: %s: long_context.above_input_tokens must be positive", id)
			}
			rates = append(rates, rate{"long_context.input_per_mtok", &lc.InputPerMTok}, rate{"long_context.output_per_mtok", &lc.OutputPerMTok},
				rate{"long_context.cache_write_per_mtok", lc.CacheWritePerMTok}, rate{"long_context.cache_read_per_mtok", lc.CacheReadPerMTok})
		}
		for _, r := range rates {
			switch {
			case r.v == nil:
			case math.IsNaN(*r.v) || math.IsInf(*r.v, 0):
				return nil, fmt.Errorf("prices: %s: %s %g is not a finite number", id, r.name, *r.v)
			case *r.v < 0:
				return nil, fmt.Errorf("prices: %s: rates must not be negative (%s %g)", id, r.name, *r.v)
			case *r.v > MaxRatePerMTok:
				return nil, fmt.Errorf("prices: %s: %s %g is above %g, the most a rate may be (US dollars per million tokens)", id, r.name, *r.v, MaxRatePerMTok)
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

// rates are one tier's rates with the cache rates resolved.
type rates struct{ in, out, cacheWrite, cacheRead float64 }

// tier returns the rates that apply to a call whose prompt (input + cache
// creation + cache read tokens) has prompt tokens.
func (p Price) tier(prompt int64) rates {
	in, out, cw, cr := p.InputPerMTok, p.OutputPerMTok, p.CacheWritePerMTok, p.CacheReadPerMTok
	if lc := p.LongContext; lc != nil && prompt > lc.AboveInputTokens {
		in, out, cw, cr = lc.InputPerMTok, lc.OutputPerMTok, lc.CacheWritePerMTok, lc.CacheReadPerMTok
	}
	r := rates{in: in, out: out, cacheWrite: in, cacheRead: in}
	if cw != nil {
		r.cacheWrite = *cw
	}
	if cr != nil {
		r.cacheRead = *cr
	}
	return r
}

// Cost is what a model call with usage u costs at price p, in US dollars.
func (p Price) Cost(u flow.Usage) float64 {
	r := p.tier(u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens)
	return (float64(u.InputTokens)*r.in + float64(u.OutputTokens)*r.out +
		float64(u.CacheCreationInputTokens)*r.cacheWrite + float64(u.CacheReadInputTokens)*r.cacheRead) / 1e6
}

// WorstCase is the most a model call can cost at price p when its prompt
// has at most prompt tokens and its answer at most maxTokens: every prompt
// token at the dearest prompt rate (input, cache write or cache read) of
// the tier that prompt falls in, every answer token at the output rate.
func (p Price) WorstCase(prompt, maxTokens int64) float64 {
	r := p.tier(prompt)
	return (float64(prompt)*max(r.in, r.cacheWrite, r.cacheRead) + float64(maxTokens)*r.out) / 1e6
}

// PromptFraming is the allowance, in tokens, that PromptBound adds for what
// a provider wraps around a request (role markers, tool-use formatting, the
// tools' framing). It is generous: a bound that is too low would let a call
// pass the cost ceiling.
const PromptFraming = 1024

// PromptBound is an upper bound of the prompt tokens of a model request:
// one token per UTF-8 byte of what the client sends (the model, system
// prompt and messages as the call's input, and every offered tool's name,
// description and input schema; no tokenizer makes a token of less than a
// byte), plus PromptFraming.
func PromptBound(input []byte, req *flow.ModelRequest) int64 {
	n := int64(len(input)) + PromptFraming
	if req != nil {
		for _, t := range req.ToolSpecs {
			n += int64(len(t.Name) + len(t.Description) + len(t.InputSchema))
		}
	}
	return n
}

// USD is an amount of US dollars that encodes in JSON rounded to the
// nano-dollar, so that sums of per-token prices print without float noise
// (0.001141, not 0.0011409999999999998).
type USD float64

// MarshalJSON implements json.Marshaler.
func (u USD) MarshalJSON() ([]byte, error) {
	v := math.Round(float64(u)*1e9) / 1e9
	return strconv.AppendFloat(nil, v, 'f', -1, 64), nil
}
