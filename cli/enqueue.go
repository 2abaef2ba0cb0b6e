package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/journal"
	"github.com/pyrula/caseworker/messages"
	"github.com/pyrula/caseworker/worker/client"
)

// Environment of enqueue besides PYRULA_VALKEY_URL and PYRULA_NAMESPACE:
// the worker's streams, read as the worker reads them.
const (
	envCaseStream  = "PYRULA_CASE_STREAM"
	envReplyStream = "PYRULA_REPLY_STREAM"
)

// enqueueTypes are the message types enqueue sends.
var enqueueTypes = []messages.MessageType{messages.SaveCase, messages.RunCase, messages.DeleteCaseBundle, messages.StartRun}

// enqueueCmd is `enqueue TYPE --body JSON|@FILE [--message-id ID] [--wait]
// [--follow] [--timeout D]`: the platform side of the worker protocol, for
// operators and tests.
func (a *app) enqueueCmd() *cobra.Command {
	var body, messageID string
	var wait, follow bool
	var timeout time.Duration
	c := &cobra.Command{
		Use:   "enqueue TYPE --body JSON|@FILE",
		Short: "Send a message to the case worker and wait for its reply",
		Long: `Sends a message of TYPE (save_case, run_case, delete_case_bundle or
start_run) with the JSON object --body (or @FILE, @- for standard input) to
the worker's case stream (PYRULA_CASE_STREAM, default <namespace>:case-messages,
on PYRULA_VALKEY_URL), asking for the reply on PYRULA_REPLY_STREAM (default
<namespace>:case-replies). The message id is --message-id or a new one;
resending an id gets the same reply.

Without --wait it prints what was sent: {"message_id", "type", "entry_id",
"stream", "reply_to"}. With --wait it prints the reply as one JSON line; with
--follow (implies --wait) it then prints each event of a start_run or
run_case run as a JSON line, as it arrives, until the terminal one.

Exit status: 0 an ok reply (and, when following, a completed run); 2 a
refused reply; 3 an error reply, or a followed run that ended with run:error,
was cancelled or suspended; 1 invalid input or an operational error
(including no reply within --timeout).`,
		Args: exactArgs("TYPE"),
		RunE: a.run(func(ctx context.Context, args []string) error {
			typ := messages.MessageType(args[0])
			if !isEnqueueType(typ) {
				return fmt.Errorf("enqueue: unknown message type %q (one of %s)", args[0], enqueueTypeList())
			}
			raw, err := a.readBody(body)
			if err != nil {
				return err
			}
			if timeout < 0 {
				return errors.New("enqueue: --timeout must not be negative")
			}
			return a.withValkey(func(vc valkey.Client, ns string) error {
				cl, err := client.New(vc, client.Options{
					Namespace: ns, CaseStream: a.getenv(envCaseStream), ReplyStream: a.getenv(envReplyStream),
				})
				if err != nil {
					return fmt.Errorf("enqueue: %w", err)
				}
				return a.enqueue(ctx, cl, client.Message{MessageID: messageID, Type: typ, Body: raw}, wait || follow, follow, timeout)
			})
		}),
	}
	c.Flags().StringVar(&body, "body", "", "the message body: a JSON object, or @FILE (@- for standard input)")
	c.Flags().StringVar(&messageID, "message-id", "", "the message id (default a new msg_<hex>)")
	c.Flags().BoolVar(&wait, "wait", false, "wait for the reply and print it")
	c.Flags().BoolVar(&follow, "follow", false, "wait for the reply, then print the run's events until the terminal one")
	c.Flags().DurationVar(&timeout, "timeout", 0, "give up waiting after this long, e.g. 30s (default: wait until interrupted)")
	a.journalFlags(c)
	return c
}

func isEnqueueType(t messages.MessageType) bool {
	for _, k := range enqueueTypes {
		if t == k {
			return true
		}
	}
	return false
}

func enqueueTypeList() string {
	names := make([]string, len(enqueueTypes))
	for i, t := range enqueueTypes {
		names[i] = string(t)
	}
	return strings.Join(names, ", ")
}

// readBody reads --body: inline JSON or @FILE; it must be a JSON object.
func (a *app) readBody(flag string) (json.RawMessage, error) {
	if flag == "" {
		return nil, errors.New("enqueue: --body is required (a JSON object, or @FILE)")
	}
	raw := []byte(flag)
	if name, ok := strings.CutPrefix(flag, "@"); ok {
		var err error
		if name == "-" {
			raw, err = io.ReadAll(a.stdin)
		} else {
			raw, err = os.ReadFile(name)
		}
		if err != nil {
			return nil, fmt.Errorf("enqueue: read --body %s: %w", flag, err)
		}
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(raw, &obj); err != nil || obj == nil {
		return nil, errors.New("enqueue: --body is not a JSON object")
	}
	return json.RawMessage(strings.TrimSpace(string(raw))), nil
}

// withValkey connects to PYRULA_VALKEY_URL (default redis://127.0.0.1:6379/0)
// and resolves the namespace (--namespace, PYRULA_NAMESPACE, pyrula), as the
// journal commands do.
func (a *app) withValkey(f func(valkey.Client, string) error) error {
	ns := a.namespace
	if ns == "" {
		ns = a.getenv(envNamespace)
	}
	if ns == "" {
		ns = journal.DefaultNamespace
	}
	if err := journal.CheckNamespace(ns); err != nil {
		return err
	}
	vc, err := a.valkeyClient()
	if err != nil {
		return err
	}
	defer vc.Close()
	return f(vc, ns)
}

// enqueue sends m and, when asked, waits for its reply and follows its run.
func (a *app) enqueue(ctx context.Context, cl *client.Client, m client.Message, wait, follow bool, timeout time.Duration) error {
	sent, err := cl.Send(ctx, m)
	if err != nil {
		return err
	}
	if !wait {
		return a.emit(sent)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	r, err := cl.Reply(ctx, sent)
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("enqueue: no reply to %s within --timeout %s (is a worker consuming %s?)", sent.MessageID, timeout, sent.Stream)
	}
	if err != nil {
		return err
	}
	if err := a.emit(r); err != nil {
		return err
	}
	switch r.Status {
	case messages.StatusRefused:
		return exitStatus(messages.ExitRefused)
	case messages.StatusError:
		return exitStatus(messages.ExitRunFailed)
	}
	if !follow || (m.Type != messages.StartRun && m.Type != messages.RunCase) {
		return nil
	}
	res, err := client.RunResult(r)
	if err != nil {
		return err
	}
	end, err := cl.Follow(ctx, res.Events, func(ev journal.Event) error {
		raw, err := ev.JSON()
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(a.stdout, "%s\n", raw)
		return err
	})
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("enqueue: run %s did not end within --timeout %s", res.RunID, timeout)
	}
	if err != nil {
		return err
	}
	if end.Status != journal.StatusComplete {
		return exitStatus(messages.ExitRunFailed)
	}
	return nil
}
