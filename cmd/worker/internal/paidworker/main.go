// Command paidworker is the worker of cmd/worker's TestNoPaidCallTwice:
// the example targets and the agent "paid", whose three model calls are
// paid (a local OpenAI-compatible server counts and bills them) and whose
// write step "notify", between the first and the second, POSTs to
// PAIDTEST_WRITE_URL, which counts its executions.
package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/pyrula/caseworker/daemon"
	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/examples"
)

func main() {
	os.Exit(daemon.Options{Register: register}.Run())
}

// PaidInputs are the paid agent's inputs.
type PaidInputs struct {
	Topic string `json:"topic"`
}

// PaidResult is the paid agent's result: its three answers.
type PaidResult struct {
	Answers []string `json:"answers"`
}

// NotifyInput is what the write step sends.
type NotifyInput struct {
	Text string `json:"text"`
}

// NotifyResult is the write's HTTP status.
type NotifyResult struct {
	Status int `json:"status"`
}

func register(reg *flow.Registry) error {
	if _, err := examples.Register(reg); err != nil {
		return err
	}
	notify := flow.DefineStep("notify", flow.Write, func(ctx context.Context, in NotifyInput) (NotifyResult, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, os.Getenv("PAIDTEST_WRITE_URL"), strings.NewReader(in.Text))
		if err != nil {
			return NotifyResult{}, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return NotifyResult{}, err
		}
		resp.Body.Close()
		return NotifyResult{Status: resp.StatusCode}, nil
	})
	return flow.RegisterAgent(reg, flow.Agent[PaidInputs, PaidResult]{
		Name:        "paid",
		CodeVersion: "paid/v1",
		Model:       "m1",
		System:      "Answer in one line.",
		Defaults:    PaidInputs{Topic: "refunds"},
		Steps:       []flow.Decl{notify},
		Run: func(ctx context.Context, in PaidInputs) (PaidResult, error) {
			var out PaidResult
			for i := range 3 {
				if i == 1 {
					if _, err := notify.Call(ctx, NotifyInput{Text: "answered: " + out.Answers[0]}); err != nil {
						return out, err
					}
				}
				resp, err := flow.Model(ctx, flow.ModelRequest{Messages: []flow.Message{flow.UserText(fmt.Sprintf("Question %d on %s?", i+1, in.Topic))}})
				if err != nil {
					return out, err
				}
				out.Answers = append(out.Answers, resp.Text())
			}
			return out, nil
		},
	})
}
