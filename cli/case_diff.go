package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/store"
)

// exitDifferent is the exit status of `case diff` when the two cases
// differ (0: identical; 1: invalid input or an operational error; 2: a
// refusal). It is the CLI's own extension of the product page's statuses,
// so that a script tells "different" from a failure to compare.
const exitDifferent = 4

// diffManifest is the {"type":"manifest"} line of case diff.
type diffManifest struct {
	Type        string            `json:"type"`
	FixtureHash pair[bundle.Hash] `json:"fixture_hash"`
	// Changed names the compared fields that differ, of target_name,
	// kind, code_version, model, fork_after_seq, inputs, registration.
	Changed      []string          `json:"changed"`
	TargetName   pair[string]      `json:"target_name"`
	Kind         pair[bundle.Kind] `json:"kind"`
	CodeVersion  pair[string]      `json:"code_version"`
	Model        pair[*string]     `json:"model"`
	ForkAfterSeq pair[*int64]      `json:"fork_after_seq"`
	Inputs       *fieldDiff        `json:"inputs"`
	Registration *fieldDiff        `json:"registration"`
	// PyrulaVersion and Source say where each case came from; they are
	// not compared.
	PyrulaVersion pair[string]        `json:"pyrula_version"`
	Source        pair[bundle.Source] `json:"source"`
}

// diffSummary is the {"type":"summary"} line of case diff.
type diffSummary struct {
	Type            string            `json:"type"`
	Identical       bool              `json:"identical"`
	FixtureHash     pair[bundle.Hash] `json:"fixture_hash"`
	ManifestChanged []string          `json:"manifest_changed"`
	Calls           callCounts        `json:"calls"`
}

// caseDiffCmd is `case diff A B [--values] [--format json|table]`.
func (a *app) caseDiffCmd() *cobra.Command {
	var values bool
	var format, htmlPath string
	c := &cobra.Command{
		Use:   "diff A B",
		Short: "Compare two saved cases: manifests, then calls by (kind, key)",
		Long: `Compares two cases, each a fixture hash in the store or a bundle file
(.case blob or JSON): their manifests (target, kind, code version, model,
fork, inputs, registration) and their recorded calls, matched by (kind, key)
in run order. Prints a {"type":"manifest"} line, one {"type":"call"} line per
call added (only B has it), removed (only A has it) or changed (fingerprint,
outcome, result or error, with JSON-path diffs of inputs and results), then
a {"type":"summary"} line. Values only with --values (which warns on stderr:
bundles hold unredacted data). --format table prints the same for people;
--html FILE also writes them as one self-contained HTML page.

A call whose fingerprint differs carries the JSON-path diff of its inputs
where both cases keep them (no_input says which does not), for a model call
the parts that changed (model, system prompt with a line diff, tools,
messages), and its role among those calls in run order: the first is the
cause, a later one is consequent when its changed input carries a value an
earlier changed call's result produced (caused_by), else independent.

Exit 0 identical, 4 different, 2 a refusal (invalid_fixture_hash,
no_fixture_store, bundle_missing, bundle_corrupt, format_unsupported), 1
invalid input.`,
		Args: exactArgs("A", "B"),
		RunE: a.run(func(ctx context.Context, args []string) error {
			return a.caseDiff(ctx, args[0], args[1], values, format, htmlPath)
		}),
	}
	c.Flags().BoolVar(&values, "values", false, "include the values of what differs")
	c.Flags().StringVar(&format, "format", "json", "json (JSON lines) or table")
	c.Flags().StringVar(&htmlPath, "html", "", "also write the comparison as a self-contained HTML page to this file")
	return c
}

func (a *app) caseDiff(ctx context.Context, argA, argB string, values bool, format, htmlPath string) error {
	if format != "json" && format != "table" {
		return fmt.Errorf("case diff: --format %s: want json or table", plainOrQuoted(format))
	}
	if err := checkHTMLPath("case diff", htmlPath); err != nil {
		return err
	}
	cbs, err := a.loadCases(ctx, "case diff", []string{argA, argB})
	if err != nil {
		return err
	}
	var bs [2]*bundle.Bundle
	for i, cb := range cbs {
		if bs[i], err = cb.Decode(); err != nil {
			return fmt.Errorf("case diff %s: %w", []string{argA, argB}[i], err)
		}
	}
	hashes := pair[bundle.Hash]{cbs[0].Hash(), cbs[1].Hash()}
	man := diffManifests(bs[0], bs[1], values)
	man.FixtureHash = hashes
	calls, counts := diffCalls(bundleCalls(bs[0]), bundleCalls(bs[1]), values)
	sum := diffSummary{Type: "summary", FixtureHash: hashes, ManifestChanged: man.Changed, Calls: counts,
		Identical: len(man.Changed) == 0 && len(calls) == 0}
	if values {
		a.warnUnredacted("the output of case diff --values")
	}
	if htmlPath != "" {
		title := fmt.Sprintf("%s case diff %s %s", a.name(), argA, argB)
		if err := writeReport(htmlPath, diffReport(title, values, man, calls, sum)); err != nil {
			return fmt.Errorf("case diff: --html: %w", err)
		}
	}
	if format == "table" {
		if err := writeDiffTable(a.stdout, [2]string{argA, argB}, man, calls, sum); err != nil {
			return fmt.Errorf("write output: %w", err)
		}
	} else {
		if err := a.emit(man); err != nil {
			return err
		}
		for _, c := range calls {
			c.Type = "call"
			if err := a.emit(c); err != nil {
				return err
			}
		}
		if err := a.emit(sum); err != nil {
			return err
		}
	}
	if !sum.Identical {
		return exitStatus(exitDifferent)
	}
	return nil
}

// diffManifests compares the manifests of two bundles.
func diffManifests(a, b *bundle.Bundle, values bool) diffManifest {
	ma, mb := a.Manifest, b.Manifest
	d := diffManifest{Type: "manifest", Changed: []string{},
		TargetName:    pair[string]{ma.TargetName, mb.TargetName},
		Kind:          pair[bundle.Kind]{ma.Kind, mb.Kind},
		CodeVersion:   pair[string]{ma.CodeVersion, mb.CodeVersion},
		Model:         pair[*string]{recordedModel(ma), recordedModel(mb)},
		ForkAfterSeq:  pair[*int64]{ma.ForkAfterSeq, mb.ForkAfterSeq},
		PyrulaVersion: pair[string]{ma.PyrulaVersion, mb.PyrulaVersion},
		Source:        pair[bundle.Source]{ma.Source, mb.Source},
		Inputs:        diffFields(orNull(ma.Inputs), orNull(mb.Inputs), values),
	}
	regA, errA := json.Marshal(ma.Registration)
	regB, errB := json.Marshal(mb.Registration)
	if errA == nil && errB == nil {
		d.Registration = diffFields(regA, regB, values)
	}
	for _, f := range []struct {
		name    string
		changed bool
	}{
		{"target_name", ma.TargetName != mb.TargetName},
		{"kind", ma.Kind != mb.Kind},
		{"code_version", ma.CodeVersion != mb.CodeVersion},
		{"model", fmt.Sprint(deref(d.Model.A)) != fmt.Sprint(deref(d.Model.B)) || (d.Model.A == nil) != (d.Model.B == nil)},
		{"fork_after_seq", (ma.ForkAfterSeq == nil) != (mb.ForkAfterSeq == nil) || ma.ForkAfterSeq != nil && *ma.ForkAfterSeq != *mb.ForkAfterSeq},
		{"inputs", !d.Inputs.empty()},
		{"registration", !d.Registration.empty()},
	} {
		if f.changed {
			d.Changed = append(d.Changed, f.name)
		}
	}
	return d
}

// recordedModel is the manifest's recorded_config.model, nil when it has
// none.
func recordedModel(m bundle.Manifest) *string {
	var rc struct {
		Model *string `json:"model"`
	}
	if json.Unmarshal(m.RecordedConfig, &rc) != nil {
		return nil
	}
	return rc.Model
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// orNull is raw, or the JSON null when raw is empty.
func orNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage("null")
	}
	return raw
}

// loadCases reads each CASE argument (see loadCase), checking every
// argument before it opens the store, and opening it once for all the
// hashes.
func (a *app) loadCases(ctx context.Context, verb string, args []string) ([]*bundle.Canonical, error) {
	out := make([]*bundle.Canonical, len(args))
	hashes := make([]bundle.Hash, len(args)) // "" for a file
	stored := false
	for i, arg := range args {
		if st, err := os.Stat(arg); err == nil && !st.IsDir() {
			continue
		}
		if looksLikePath(arg) {
			return nil, fmt.Errorf("%s: no bundle file %s", verb, arg)
		}
		h, err := parseHash(arg)
		if err != nil {
			return nil, err
		}
		hashes[i], stored = h, true
	}
	for i, arg := range args {
		if hashes[i] != "" {
			continue
		}
		cb, err := readBundleFile(verb, arg)
		if err != nil {
			return nil, err
		}
		out[i] = cb
	}
	if !stored {
		return out, nil
	}
	err := a.withStore(ctx, func(s store.Store) error {
		for i, h := range hashes {
			if h == "" {
				continue
			}
			cb, err := store.LoadWith(ctx, s, h, bundle.Options{Decode: true})
			if err != nil {
				return fmt.Errorf("%s: %w", verb, err)
			}
			out[i] = cb
		}
		return nil
	})
	return out, err
}

// writeDiffTable writes case diff's lines as a table for people: the
// manifest's fields side by side (a "*" marks what differs), then one row
// per call that differs; with --values each differing path's values under
// its row.
func writeDiffTable(w io.Writer, args [2]string, man diffManifest, calls []callChange, sum diffSummary) error {
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintf(tw, "A\t%s\t%s\n", man.FixtureHash.A, args[0])
	fmt.Fprintf(tw, "B\t%s\t%s\n", man.FixtureHash.B, args[1])
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "MANIFEST\tA\tB\t")
	row := func(name, a, b string) {
		mark := ""
		if slices.Contains(man.Changed, name) {
			mark = "*"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", name, a, b, mark)
	}
	row("target_name", man.TargetName.A, man.TargetName.B)
	row("kind", string(man.Kind.A), string(man.Kind.B))
	row("code_version", man.CodeVersion.A, man.CodeVersion.B)
	row("model", nullText(man.Model.A), nullText(man.Model.B))
	row("fork_after_seq", nullText(man.ForkAfterSeq.A), nullText(man.ForkAfterSeq.B))
	for _, f := range []struct {
		name string
		d    *fieldDiff
	}{{"inputs", man.Inputs}, {"registration", man.Registration}} {
		if f.d.empty() {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t\t*\n", f.name, strings.TrimPrefix(pathsText(f.d), " "))
		for _, p := range diffPaths(f.d) {
			if v, ok := f.d.Values[p]; ok {
				fmt.Fprintf(tw, "  %s\t%s\t%s\t\n", p, rawText(v.A), rawText(v.B))
			}
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprintln(tw, "CALL\tFINGERPRINT A\tFINGERPRINT B\tCHANGE")
	for _, c := range calls {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Call, short(c.Fingerprint.A), short(c.Fingerprint.B), describeChange(c))
		for _, d := range []*fieldDiff{c.Input, c.Result, c.Error} {
			if d == nil {
				continue
			}
			for _, p := range diffPaths(d) {
				if v, ok := d.Values[p]; ok {
					fmt.Fprintf(tw, "  %s\t\t\t%s → %s\n", p, rawText(v.A), rawText(v.B))
				}
			}
		}
		if c.Value != nil {
			fmt.Fprintf(tw, "  value\t\t\t%s → %s\n", rawText(c.Value.A), rawText(c.Value.B))
		}
	}
	if len(calls) == 0 {
		fmt.Fprintln(tw, "(no call differs)\t\t\t")
	}
	fmt.Fprintln(tw)
	verdict := "different"
	if sum.Identical {
		verdict = "identical"
	}
	n := sum.Calls
	fmt.Fprintf(tw, "%s: %d call(s) changed, %d added, %d removed, %d the same\n", verdict, n.Changed, n.Added, n.Removed, n.Same)
	return tw.Flush()
}

// diffPaths are a diff's paths: added, removed, then changed.
func diffPaths(d *fieldDiff) []string {
	return slices.Concat(d.Added, d.Removed, d.Changed)
}

// nullText is *p as text, or "null".
func nullText[T any](p *T) string {
	if p == nil {
		return "null"
	}
	return fmt.Sprint(*p)
}

// short is the first 12 characters of a fingerprint, or "-".
func short(fp *string) string {
	if fp == nil {
		return "-"
	}
	if len(*fp) > 12 {
		return (*fp)[:12]
	}
	return *fp
}

// rawText is a JSON value on one line, or "-" when absent.
func rawText(raw json.RawMessage) string {
	if raw == nil {
		return "-"
	}
	return oneLine(string(raw))
}
