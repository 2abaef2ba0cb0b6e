package storetest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/pyrula/caseworker/bundle"
)

// Bundle returns a small, valid, canonical bundle that differs for every i.
// The shapes vary with i: a workflow forked mid-run with history and results
// (some after the fork, one recorded error), an agent with tools and model
// calls, and an inputs-only case (no fork). Inputs of some bundles carry a
// few KiB of poorly compressible text, so blobs span several reads.
func Bundle(t testing.TB, i int) *bundle.Canonical {
	t.Helper()
	c, err := bundle.Encode(NewBundle(i))
	if err != nil {
		t.Fatalf("storetest: encode bundle %d: %v", i, err)
	}
	return c
}

// NewBundle returns the Go value that Bundle encodes.
func NewBundle(i int) *bundle.Bundle {
	raw := func(format string, args ...any) json.RawMessage {
		return json.RawMessage(fmt.Sprintf(format, args...))
	}
	inputs := raw(`{"sku":"SKU-%d","qty":%d,"note":"café ☕ \u2028 <&>","pad":%q}`, i, i%7+1, pad(i, (i%4)*3000))
	m := bundle.Manifest{
		Format:      bundle.Format,
		Kind:        bundle.KindWorkflow,
		TargetName:  "checkout",
		CodeVersion: fmt.Sprintf("v1.%d.0", i),
		Registration: bundle.Registration{
			Tools: []bundle.Tool{},
			Steps: []bundle.Step{
				{ID: "reserve", Name: "reserve", Effect: "read"},
				{ID: "charge", Name: "charge", Effect: "write"},
				{ID: "total", Name: "total", Effect: "pure"},
			},
		},
		RecordedConfig: raw(`{}`),
		PyrulaVersion:  "0.1.0",
		Source:         bundle.Source{RunID: fmt.Sprintf("run_%04d", i), Namespace: "pyrula", Origin: "valkey"},
		Capture:        bundle.Capture{Complete: true, Missing: []json.RawMessage{}},
		Inputs:         inputs,
	}
	b := &bundle.Bundle{Manifest: m, History: []json.RawMessage{}, Results: []bundle.Result{}}
	at := func(seq int) string { return fmt.Sprintf("2025-01-02T03:04:%02dZ", seq) }
	call := func(kind, key, effect string) string {
		return fmt.Sprintf(`{"kind":%q,"key":%q,"fingerprint":%q,"effect":%q}`, kind, key, fingerprint(i, kind, key), effect)
	}
	result := func(kind, key, value string) bundle.Result {
		return bundle.Result{Kind: kind, Key: key, Fingerprint: fingerprint(i, kind, key), Result: raw("%s", value)}
	}
	switch i % 3 {
	case 0: // a workflow forked after seq 4; results include post-fork calls
		fork := int64(4)
		b.Manifest.ForkAfterSeq = &fork
		b.History = []json.RawMessage{
			raw(`{"run_seq":1,"kind":"run:submitted","at":%q}`, at(1)),
			raw(`{"run_seq":2,"kind":"run:start","at":%q,"inputs":%s,"code_version":%q}`, at(2), inputs, m.CodeVersion),
			raw(`{"run_seq":3,"kind":"call:start","at":%q,"call":%s,"input":{"sku":"SKU-%d"}}`, at(3), call("step", "reserve:0", "read"), i),
			raw(`{"run_seq":4,"kind":"call:done","at":%q,"call":%s}`, at(4), call("step", "reserve:0", "read")),
		}
		// Deliberately not in (kind, key) order: Encode sorts them.
		b.Results = []bundle.Result{
			result("step", "total:0", fmt.Sprintf(`{"cents":%d,"rate":0.1,"big":123456789012345678901234567890}`, 1999*i)),
			result("now", "0", `"2025-01-02T03:04:05Z"`),
			result("step", "reserve:0", `{"reserved":true}`),
			{Kind: "step", Key: "charge:0", Fingerprint: fingerprint(i, "step", "charge:0"),
				Error: raw(`{"type":"PaymentDeclined","message":"card declined"}`)},
		}
	case 1: // an agent with tools, forked after seq 3
		fork := int64(3)
		b.Manifest.Kind = bundle.KindAgent
		b.Manifest.TargetName = "support_agent"
		b.Manifest.ForkAfterSeq = &fork
		b.Manifest.Registration.Tools = []bundle.Tool{{Name: "lookup_order", Writes: false}, {Name: "refund", Writes: true}}
		b.Manifest.RecordedConfig = raw(`{"model":"claude-sonnet-4-5"}`)
		b.History = []json.RawMessage{
			raw(`{"run_seq":1,"kind":"run:submitted","at":%q}`, at(1)),
			raw(`{"run_seq":2,"kind":"run:start","at":%q,"inputs":%s,"code_version":%q}`, at(2), inputs, m.CodeVersion),
			raw(`{"run_seq":3,"kind":"call:start","at":%q,"call":%s,"input":{"turn":0}}`, at(3), call("model", "0", "read")),
		}
		b.Results = []bundle.Result{
			result("tool", "toolu_01", `{"order":"A-1","status":"shipped"}`),
			result("model", "0", `{"role":"assistant","content":[{"type":"tool_use","id":"toolu_01","name":"lookup_order","input":{"id":"A-1"}}]}`),
			result("model", "1", `"Your order A-1 has shipped."`),
		}
	case 2: // inputs only: no fork, no history, no results
	}
	return b
}

// fingerprint returns a realistic call fingerprint (hex SHA-256).
func fingerprint(i int, kind, key string) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%d:%s:%s", i, kind, key))
	return hex.EncodeToString(sum[:])
}

// pad returns n characters of hex text that zstd cannot shrink much.
func pad(seed, n int) string {
	var sb strings.Builder
	sum := sha256.Sum256(fmt.Appendf(nil, "pad %d", seed))
	for sb.Len() < n {
		sb.WriteString(hex.EncodeToString(sum[:]))
		sum = sha256.Sum256(sum[:])
	}
	return sb.String()[:n]
}

// canonicalBytes returns the canonical bytes of c.
func canonicalBytes(t testing.TB, c *bundle.Canonical) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		t.Fatalf("canonical bytes of %s: %v", c.Hash().Short(), err)
	}
	return buf.Bytes()
}

// blobBytes returns the zstd blob of c, as a store holds it.
func blobBytes(t testing.TB, c *bundle.Canonical) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := c.WriteBlob(&buf); err != nil {
		t.Fatalf("blob of %s: %v", c.Hash().Short(), err)
	}
	return buf.Bytes()
}
