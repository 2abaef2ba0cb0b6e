// Package llm owns the live model clients of case runs, recorded runs and
// the worker: the retry policy every provider client shares (Policy, Do)
// and the choice of a client by name (--llm-ref, llm_ref, PYRULA_LLM_REF).
// The provider clients are its sub-packages: llm/anthropicllm (the
// Anthropic Messages API) and llm/openaillm (OpenAI Chat Completions and
// any server compatible with it). llm imports flow; flow, replay and the
// journal never import llm.
package llm

import "strconv"

func parseFloat(s string) (float64, error) { return strconv.ParseFloat(s, 64) }
