// Package explain says what changed in a call and why: which parts of a
// model call's input changed (model, system prompt, tool list, messages)
// with a line diff of the prompt, and, when several calls changed, which
// one is the cause and whether each later one is a consequence of an
// earlier changed result or independent of it.
//
// It works on JSON values only, so that the case-run engine (replay), the
// CLI's case diff and case compare, and the reports built from them give
// one answer. explain imports only the standard library, the project's
// internal/jsondiff and a line-diff library; never flow, bundle or replay.
package explain

import (
	"encoding/json"
	"fmt"
	"strings"

	udiff "github.com/aymanbagabas/go-udiff"
)

// LineContext is how many unchanged lines a line diff shows around each
// change.
const LineContext = 2

// LineDiff compares two texts line by line and returns the changed hunks
// as lines: "@@ -3,2 +3,3 @@" starts a hunk (the first line and count in
// each text), then " " marks a line both have, "-" one only a has, "+" one
// only b has, with LineContext lines of context. It returns nil when the
// texts are equal.
func LineDiff(a, b string) []string {
	if a == b {
		return nil
	}
	edits := udiff.Lines(a, b)
	u, err := udiff.ToUnifiedDiff("recorded", "actual", a, edits, LineContext)
	if err != nil {
		return []string{"@@ the texts differ @@"}
	}
	var out []string
	for _, h := range u.Hunks {
		from, to := 0, 0
		for _, l := range h.Lines {
			switch l.Kind {
			case udiff.Delete:
				from++
			case udiff.Insert:
				to++
			default:
				from++
				to++
			}
		}
		out = append(out, fmt.Sprintf("@@ -%d,%d +%d,%d @@", h.FromLine, from, h.ToLine, to))
		for _, l := range h.Lines {
			text := strings.TrimSuffix(l.Content, "\n")
			switch l.Kind {
			case udiff.Delete:
				out = append(out, "-"+text)
			case udiff.Insert:
				out = append(out, "+"+text)
			default:
				out = append(out, " "+text)
			}
		}
	}
	return out
}

// Pair is a value as recorded and as it is now.
type Pair struct {
	Recorded string `json:"recorded"`
	Actual   string `json:"actual"`
}

// ToolsChange lists the tools a model call offers now but did not in the
// recording (Added) and the other way round (Removed). A tool list that is
// null (every tool of the agent) is listed as "(every tool)".
type ToolsChange struct {
	Added   []string `json:"added"`
	Removed []string `json:"removed"`
}

// The parts of a model call's input, in the order ModelChange lists them.
const (
	PartModel    = "model"
	PartSystem   = "system"
	PartTools    = "tools"
	PartMessages = "messages"
)

// ModelChange says what changed in a model call's input ({"model",
// "system", "messages", "tools"}): the parts that changed, the model
// recorded and now, a line diff of the system prompt, the tools added and
// removed, and the JSON path of each changed message part.
type ModelChange struct {
	// Parts are the parts that changed, of model, system, tools and
	// messages, in that order.
	Parts []string `json:"parts"`
	// Model is set when the model changed.
	Model *Pair `json:"model,omitempty"`
	// SystemDiff is the line diff of the system prompt (LineDiff), when it
	// changed.
	SystemDiff []string `json:"system_diff,omitempty"`
	// Tools is set when the tool list changed.
	Tools *ToolsChange `json:"tools,omitempty"`
	// Messages are the paths of the message parts that changed
	// ("$.messages[2].content[0].text"), when the messages changed.
	Messages []string `json:"messages,omitempty"`
}

// modelInput is what ModelChange reads of a model call's input.
type modelInput struct {
	Model  string    `json:"model"`
	System string    `json:"system"`
	Tools  *[]string `json:"tools"`
}

// Model explains a model call whose input changed: recorded and actual
// are its inputs, paths the JSON paths that differ and count (a field
// diff's added, removed and changed paths; volatile ones left out). It
// returns nil when either input is not a model call's input object.
func Model(recorded, actual json.RawMessage, paths []string) *ModelChange {
	var rec, act modelInput
	if json.Unmarshal(recorded, &rec) != nil || json.Unmarshal(actual, &act) != nil {
		return nil
	}
	m := &ModelChange{Parts: []string{}}
	var model, system, tools bool
	for _, p := range paths {
		switch {
		case p == "$" || p == "$.model":
			model = model || rec.Model != act.Model
		case p == "$.system":
			system = true
		case p == "$.tools" || strings.HasPrefix(p, "$.tools["):
			tools = true
		case p == "$.messages" || strings.HasPrefix(p, "$.messages[") || strings.HasPrefix(p, "$.messages."):
			m.Messages = append(m.Messages, p)
		}
	}
	if model {
		m.Parts = append(m.Parts, PartModel)
		m.Model = &Pair{Recorded: rec.Model, Actual: act.Model}
	}
	if system {
		m.Parts = append(m.Parts, PartSystem)
		m.SystemDiff = LineDiff(rec.System, act.System)
	}
	if tools {
		m.Parts = append(m.Parts, PartTools)
		m.Tools = toolsChange(rec.Tools, act.Tools)
	}
	if len(m.Messages) > 0 {
		m.Parts = append(m.Parts, PartMessages)
	}
	return m
}

// everyTool names a null tool list: every tool of the agent.
const everyTool = "(every tool)"

func toolsChange(rec, act *[]string) *ToolsChange {
	names := func(l *[]string) []string {
		if l == nil {
			return []string{everyTool}
		}
		return *l
	}
	r, a := names(rec), names(act)
	in := func(list []string, s string) bool {
		for _, x := range list {
			if x == s {
				return true
			}
		}
		return false
	}
	t := &ToolsChange{Added: []string{}, Removed: []string{}}
	for _, s := range a {
		if !in(r, s) {
			t.Added = append(t.Added, s)
		}
	}
	for _, s := range r {
		if !in(a, s) {
			t.Removed = append(t.Removed, s)
		}
	}
	return t
}

// Summary words a model change on one line: "the system prompt changed
// (1 line removed, 2 added); messages changed at $.messages[0].content".
func (m *ModelChange) Summary() string {
	if m == nil || len(m.Parts) == 0 {
		return ""
	}
	var parts []string
	for _, p := range m.Parts {
		switch p {
		case PartModel:
			parts = append(parts, fmt.Sprintf("the model changed (%s → %s)", m.Model.Recorded, m.Model.Actual))
		case PartSystem:
			removed, added := 0, 0
			for _, l := range m.SystemDiff {
				switch {
				case strings.HasPrefix(l, "@@"):
				case strings.HasPrefix(l, "-"):
					removed++
				case strings.HasPrefix(l, "+"):
					added++
				}
			}
			parts = append(parts, fmt.Sprintf("the system prompt changed (%d line(s) removed, %d added)", removed, added))
		case PartTools:
			parts = append(parts, fmt.Sprintf("the tool list changed (added %v, removed %v)", m.Tools.Added, m.Tools.Removed))
		case PartMessages:
			parts = append(parts, "the messages changed at "+ListPaths(m.Messages))
		}
	}
	return strings.Join(parts, "; ")
}

// ListPaths joins at most five JSON paths with commas, then says how many
// more: the one way a divergence's paths are listed in words.
func ListPaths(paths []string) string {
	const most = 5
	if len(paths) <= most {
		return strings.Join(paths, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(paths[:most], ", "), len(paths)-most)
}
