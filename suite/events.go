package suite

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/runevent"
)

// Event is the plan as its suite:plan event.
func (p Plan) Event(at time.Time) (host.Event, error) { return lineEvent(runevent.SuitePlan, p, at) }

// Event is the outcome as its suite:outcome event.
func (o Outcome) Event(at time.Time) (host.Event, error) {
	return lineEvent(runevent.SuiteOutcome, o, at)
}

// Progress is a suite's suite:progress line: the children done so far, by
// verdict, and their live spend.
type Progress struct {
	Type     string         `json:"type"`
	Done     int            `json:"done"`
	Total    int            `json:"total"`
	ByStatus map[string]int `json:"by_status"`
	CostUSD  float64        `json:"cost_usd"`
}

// ProgressType is the type of a suite:progress line.
const ProgressType = "suite_progress"

// Event is the progress as its suite:progress event.
func (p Progress) Event(at time.Time) (host.Event, error) {
	return lineEvent(runevent.SuiteProgress, p, at)
}

// PlanOf reads the plan of a suite:plan event.
func PlanOf(ev host.Event) (Plan, error) {
	var p Plan
	if err := decodeLine(ev, runevent.SuitePlan, &p); err != nil {
		return Plan{}, err
	}
	if len(p.Arms) == 0 || p.Total != len(p.Cases)*len(p.Arms) {
		return Plan{}, fmt.Errorf("suite:plan at run_seq %d: %d cases × %d arms is not its total %d", ev.RunSeq, len(p.Cases), len(p.Arms), p.Total)
	}
	return p, nil
}

// lineEvent is v's JSON object as an event of kind.
func lineEvent(kind runevent.Kind, v any, at time.Time) (host.Event, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return host.Event{}, fmt.Errorf("encode %s: %w", kind, err)
	}
	var extra map[string]json.RawMessage
	if err := json.Unmarshal(raw, &extra); err != nil {
		return host.Event{}, fmt.Errorf("encode %s: %w", kind, err)
	}
	return host.Event{Kind: kind, At: at, Extra: extra}, nil
}

// decodeLine decodes the members of event ev, of kind, into v.
func decodeLine(ev host.Event, kind runevent.Kind, v any) error {
	if ev.Kind != kind {
		return fmt.Errorf("run_seq %d is %s, not %s", ev.RunSeq, ev.Kind, kind)
	}
	raw, err := json.Marshal(ev.Extra)
	if err != nil {
		return fmt.Errorf("%s at run_seq %d: %w", kind, ev.RunSeq, err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%s at run_seq %d: %w", kind, ev.RunSeq, err)
	}
	return nil
}

// CaseOutcomeOf reads a child's case:outcome event.
func CaseOutcomeOf(ev host.Event) (Result, error) {
	var r Result
	return r, decodeLine(ev, runevent.CaseOutcome, &r.Outcome)
}
