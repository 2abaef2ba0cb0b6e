package runexec

import (
	"errors"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/worker/internal/replicas"
)

// outage reports whether a run's transient failure err is Valkey's rather
// than the run's: a connection lost (the EOF valkey-go returns), refused
// or timed out (a store's connection too), a failover's
// answer (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, LOADING, READONLY,
// MASTERDOWN), a write lost to a failover, or replicas that did not
// acknowledge within PYRULA_WAIT_TIMEOUT. Such failures are not counted
// toward the run's dead letter (countFailure): a run waits out an outage,
// however long, as it does when Valkey cannot count its failures at all.
// An HTTP call's failure (a model provider's) is the run's, even when a
// connection is what failed.
func outage(err error) bool {
	if err == nil {
		return false
	}
	var httpErr *url.Error
	if errors.As(err, &httpErr) {
		return false
	}
	// A connection's own failure (*net.OpError, a deadline of its reads
	// and writes), not any deadline: a context's is not an outage.
	var notAcked *replicas.NotAcknowledged
	var opErr *net.OpError
	if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, valkey.ErrClosing) || errors.Is(err, replicas.ErrLost) ||
		errors.As(err, &notAcked) || errors.As(err, &opErr) {
		return true
	}
	var ve *valkey.ValkeyError
	if !errors.As(err, &ve) {
		return false
	}
	_, moved := ve.IsMoved()
	_, ask := ve.IsAsk()
	if moved || ask || ve.IsTryAgain() || ve.IsClusterDown() || ve.IsLoading() {
		return true
	}
	msg := ve.Error()
	return strings.HasPrefix(msg, "READONLY") || strings.HasPrefix(msg, "MASTERDOWN")
}
