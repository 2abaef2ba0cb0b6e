package llm

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/pyrula/caseworker/flow/host"
)

// Policy bounds one model call: how many times it is sent, how long each
// attempt may take and how long to wait between attempts. Zero fields take
// the defaults.
type Policy struct {
	// Attempts is the most times a request is sent (DefaultAttempts).
	Attempts int
	// Timeout bounds each attempt (DefaultTimeout).
	Timeout time.Duration
	// Backoff is the wait before the second attempt; it doubles with each
	// further attempt, with jitter (DefaultBackoff).
	Backoff time.Duration
	// MaxWait caps every wait, including one a retry-after header asks for
	// (DefaultMaxWait).
	MaxWait time.Duration
}

// Defaults of Policy.
const (
	DefaultAttempts = 4
	DefaultTimeout  = 120 * time.Second
	DefaultBackoff  = 500 * time.Millisecond
	DefaultMaxWait  = 30 * time.Second
)

// withDefaults fills the zero fields.
func (p Policy) withDefaults() Policy {
	p.Attempts = cmp.Or(p.Attempts, DefaultAttempts)
	p.Timeout = cmp.Or(p.Timeout, DefaultTimeout)
	p.Backoff = cmp.Or(p.Backoff, DefaultBackoff)
	p.MaxWait = cmp.Or(p.MaxWait, DefaultMaxWait)
	return p
}

// Attempt is the outcome of one attempt that failed: the error as a
// *host.ModelError (Attempts is filled in by Do), and the wait the
// provider asked for (retry-after), 0 when it asked for none.
type Attempt struct {
	Err        *host.ModelError
	RetryAfter time.Duration
}

// Do sends a request with send until it succeeds, fails with a kind that
// is not transient, or has been sent p.Attempts times. Each attempt runs
// under its own timeout (an attempt that runs out of it fails with kind
// timeout); between attempts Do waits the provider's retry-after, else an
// exponential backoff with jitter, capped at p.MaxWait. It returns the
// first success, or the last failure with its Attempts count. When ctx ends
// it stops at once and returns ctx's error (not a ModelError: the call was
// cancelled, not failed).
func Do[T any](ctx context.Context, p Policy, send func(ctx context.Context) (T, *Attempt)) (T, error) {
	p = p.withDefaults()
	var zero T
	wait := p.Backoff
	for n := 1; ; n++ {
		actx, cancel := context.WithTimeout(ctx, p.Timeout)
		out, failed := send(actx)
		timedOut := errors.Is(actx.Err(), context.DeadlineExceeded)
		cancel()
		if err := ctx.Err(); err != nil {
			return zero, context.Cause(ctx)
		}
		if failed == nil {
			return out, nil
		}
		if timedOut && failed.Err.Kind != host.ModelTimeout {
			failed.Err.Kind = host.ModelTimeout
			failed.Err.Message = "no answer within " + p.Timeout.String()
		}
		failed.Err.Attempts = n
		if n >= p.Attempts || !failed.Err.Kind.Transient() {
			return zero, failed.Err
		}
		d := failed.RetryAfter
		if d <= 0 {
			d = wait/2 + rand.N(wait/2+1)
			wait *= 2
		}
		d = min(d, p.MaxWait)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return zero, context.Cause(ctx)
		case <-t.C:
		}
	}
}

// ParseRetryAfter reads a retry-after header: seconds ("2", "1.5") or an
// HTTP date; and retry-after-ms, which Anthropic and OpenAI also send, when
// ms is not empty (it wins). It returns 0 when neither says anything
// usable.
func ParseRetryAfter(value, ms string, now time.Time) time.Duration {
	if ms != "" {
		if f, err := parseFloat(ms); err == nil && f > 0 {
			return time.Duration(f * float64(time.Millisecond))
		}
	}
	if value == "" {
		return 0
	}
	if f, err := parseFloat(value); err == nil {
		if f > 0 {
			return time.Duration(f * float64(time.Second))
		}
		return 0
	}
	if t, err := time.Parse(time.RFC1123, value); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}
