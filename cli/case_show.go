package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/store"
)

// showOutput is what `case show` prints.
type showOutput struct {
	FixtureHash  bundle.Hash  `json:"fixture_hash"`
	FixtureStore string       `json:"fixture_store"`
	Manifest     showManifest `json:"manifest"`
	Counts       showCounts   `json:"counts"`
	// History holds showEvent values, or the events as recorded with --values.
	History []any        `json:"history"`
	Results []showResult `json:"results"`
}

// showManifest is the manifest with input values only under --values.
type showManifest struct {
	bundle.Manifest
	// Inputs hides the embedded manifest's inputs; it is set only with --values.
	Inputs json.RawMessage `json:"inputs,omitempty"`
	// InputKeys are the names of the inputs (null when inputs is not an object).
	InputKeys []string `json:"input_keys"`
}

// showCounts counts a bundle's contents.
type showCounts struct {
	History       int            `json:"history"`
	Results       int            `json:"results"`
	Errors        int            `json:"errors"`
	ResultsByKind map[string]int `json:"results_by_kind"`
}

// showEvent is a history event without values: its place, kind and call.
type showEvent struct {
	RunSeq json.RawMessage `json:"run_seq"`
	Kind   string          `json:"kind"`
	Call   *showCall       `json:"call,omitempty"`
}

// showCall is a call's identity.
type showCall struct {
	Kind string `json:"kind"`
	Key  string `json:"key"`
}

// showResult is one recorded result; its value only with --values.
type showResult struct {
	Kind        string `json:"kind"`
	Key         string `json:"key"`
	Fingerprint string `json:"fingerprint"`
	// Outcome is "result" or "error".
	Outcome string          `json:"outcome"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   json.RawMessage `json:"error,omitempty"`
}

// showCmd is `case show HASH [--values]`.
func (a *app) showCmd() *cobra.Command {
	var values bool
	c := &cobra.Command{
		Use:   "show HASH [--values]",
		Short: "Describe a stored bundle (values only with --values)",
		Long: `Reads and verifies the bundle HASH and prints one JSON object:
fixture_hash, fixture_store, manifest (input names as input_keys; the input
values only with --values), counts (history events, results, error results,
results by kind), history (run_seq, kind and the call's kind and key of each
event; whole events with --values) and results (kind, key, fingerprint and
outcome "result" or "error"; the value too with --values). --values warns on
stderr: bundles hold unredacted inputs and outputs.

Refusals: no_fixture_store, invalid_fixture_hash, bundle_missing,
bundle_corrupt.`,
		Args: exactArgs("HASH"),
		RunE: a.run(func(ctx context.Context, args []string) error {
			h, err := parseHash(args[0])
			if err != nil {
				return err
			}
			return a.withStore(ctx, func(s store.Store) error {
				return a.show(ctx, s, h, values)
			})
		}),
	}
	c.Flags().BoolVar(&values, "values", false, "include input values, whole history events and result values")
	return c
}

func (a *app) show(ctx context.Context, s store.Store, h bundle.Hash, values bool) error {
	c, err := store.LoadWith(ctx, s, h, bundle.Options{Decode: true})
	if err != nil {
		return fmt.Errorf("show: %w", err)
	}
	b, err := c.Decode()
	if err != nil {
		return fmt.Errorf("show %s: decode: %w", h, err)
	}
	out, err := describe(b, values)
	if err != nil {
		return fmt.Errorf("show %s: %w", h, err)
	}
	out.FixtureHash = h
	out.FixtureStore = s.Identity()
	if values {
		a.warnUnredacted("the output of show --values")
	}
	return a.emit(out)
}

// describe builds show's output for b.
func describe(b *bundle.Bundle, values bool) (showOutput, error) {
	out := showOutput{
		Manifest: showManifest{Manifest: b.Manifest, InputKeys: objectKeys(b.Manifest.Inputs)},
		Counts: showCounts{
			History:       len(b.History),
			Results:       len(b.Results),
			ResultsByKind: map[string]int{},
		},
		History: make([]any, 0, len(b.History)),
		Results: make([]showResult, 0, len(b.Results)),
	}
	if values {
		out.Manifest.Inputs = b.Manifest.Inputs
	}
	for i, raw := range b.History {
		if values {
			out.History = append(out.History, raw)
			continue
		}
		var ev struct {
			RunSeq json.RawMessage `json:"run_seq"`
			Kind   string          `json:"kind"`
			Call   json.RawMessage `json:"call"`
		}
		if err := json.Unmarshal(raw, &ev); err != nil {
			return showOutput{}, fmt.Errorf("history event %d: %w", i, err)
		}
		se := showEvent{RunSeq: ev.RunSeq, Kind: ev.Kind}
		var call showCall
		if len(ev.Call) > 0 && json.Unmarshal(ev.Call, &call) == nil && (call.Kind != "" || call.Key != "") {
			se.Call = &call
		}
		out.History = append(out.History, se)
	}
	for _, r := range b.Results {
		sr := showResult{Kind: r.Kind, Key: r.Key, Fingerprint: r.Fingerprint, Outcome: "result"}
		if r.Error != nil {
			sr.Outcome = "error"
			out.Counts.Errors++
		}
		if values {
			sr.Result, sr.Error = r.Result, r.Error
		}
		out.Counts.ResultsByKind[r.Kind]++
		out.Results = append(out.Results, sr)
	}
	slices.SortStableFunc(out.Results, func(x, y showResult) int {
		return cmpStrings(x.Kind, y.Kind, x.Key, y.Key)
	})
	return out, nil
}

// objectKeys returns the sorted keys of a JSON object, or nil when raw is
// not an object.
func objectKeys(raw json.RawMessage) []string {
	if !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
		return nil
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// cmpStrings compares (a1, a2) with (b1, b2) in code-point order.
func cmpStrings(a1, b1, a2, b2 string) int {
	if c := strings.Compare(a1, b1); c != 0 {
		return c
	}
	return strings.Compare(a2, b2)
}
