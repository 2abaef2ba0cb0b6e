// Package memvalkey is the embedded, in-memory queue and journal server of
// `worker demo` and of tests that must run without an outside server: a
// Redis-protocol server (github.com/alicebob/miniredis/v2) started in this
// process on 127.0.0.1 with a random port. The worker, the Valkey journal
// (journal/valkeyjournal, with its Lua scripts) and the platform client talk
// to it unchanged, over a real TCP connection with valkey-go, exactly as
// they talk to Valkey; worker/conformance_test.go runs the same worker
// scenarios against both.
//
// What it is not: durable (everything is lost when the process exits),
// replicated (WAIT answers 0 at once) or fast under load. Key TTLs run on
// the wall clock (miniredis's ClockTTL), and FastForward ages every key at
// once, so a demo can show a finished run leaving the live journal.
//
// memvalkey imports no package of the project.
package memvalkey

import (
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/valkey-io/valkey-go"
)

// Server is a running in-memory Redis-protocol server. Create it with
// Start; Close stops it.
type Server struct {
	m *miniredis.Miniredis
}

// Start starts a server on 127.0.0.1 with a port the kernel picks. Its key
// TTLs count down with the wall clock.
func Start() (*Server, error) {
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return nil, fmt.Errorf("memvalkey: start: %w", err)
	}
	m.ClockTTL(true)
	return &Server{m: m}, nil
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return s.m.Addr() }

// URL is the server's redis:// URL (database 0), as PYRULA_VALKEY_URL takes it.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// NewClient connects a valkey-go client to the server, with client-side
// caching disabled (the server has no CLIENT TRACKING), as the worker and
// the CLI configure theirs. The caller closes it.
func (s *Server) NewClient() (valkey.Client, error) {
	c, err := valkey.NewClient(ClientOption(s.Addr()))
	if err != nil {
		return nil, fmt.Errorf("memvalkey: connect to %s: %w", s.Addr(), err)
	}
	return c, nil
}

// ClientOption is the valkey-go option for a server at addr: caching
// disabled, nothing else changed.
func ClientOption(addr string) valkey.ClientOption {
	return valkey.ClientOption{InitAddress: []string{addr}, DisableCache: true}
}

// FastForward ages every key's TTL by d at once (keys whose TTL runs out
// are deleted), as if d had passed.
func (s *Server) FastForward(d time.Duration) { s.m.FastForward(d) }

// Close stops the server and drops every connection; safe twice.
func (s *Server) Close() {
	if s == nil || s.m == nil {
		return
	}
	s.m.Close()
}
