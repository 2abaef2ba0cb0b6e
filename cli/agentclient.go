package cli

import (
	"fmt"
	"strings"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/host"
	"github.com/pyrula/caseworker/llm/resolve"
)

// needModelClient refuses, before a live run starts, an agent that has no
// model client of its own when none was named (--llm-ref): its first model
// call would fail. The error says what to pass; verb ("dev") starts it.
func needModelClient(verb string, reg *flow.Registry, info host.TargetInfo, named bool) error {
	if named || info.Kind != bundle.KindAgent || reg.HasModelClient(info.Name) {
		return nil
	}
	return fmt.Errorf("%s: %s is an agent with no model client of its own: name one with --llm-ref %s",
		verb, info.Name, strings.Join(resolve.Names(reg), "|"))
}
