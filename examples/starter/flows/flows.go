// Package flows holds the starter's targets: the workflow order and the
// agent helpdesk. Its one exported function, Register, is what the worker
// (cmd/worker) and the CLI (cmd/pyrula) are built over.
//
// Copy this package as the start of your own. The rules a target's body
// follows so that its runs can be saved and replayed as cases: everything
// that touches the outside world is a call (a step, a tool, a model call),
// each call declares its effect (flow.Read, flow.Write, flow.Pure), and the
// body is deterministic given its calls' results (no time.Now, no rand: use
// flow.Now and flow.Random).
package flows

import (
	"errors"

	"github.com/pyrula/caseworker/flow"
)

// codeVersion names the code that records a run; saved cases keep it. Use
// your build's commit, e.g. "git:3f9a1c2".
const codeVersion = "starter/v1"

// Register registers the starter's targets, order and helpdesk, in reg. It
// fails when reg already holds a target of the same name.
func Register(reg *flow.Registry) error {
	return errors.Join(
		registerOrder(reg),
		registerHelpdesk(reg),
	)
}
