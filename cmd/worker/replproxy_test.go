package main_test

import (
	"bytes"
	"net"
	"sync"
	"testing"
)

// replProxy forwards one cluster node's client port (the port the node
// announces) to the node's own port, for every client: the workers, the
// other nodes' replication links. It can cut the replication stream:
// while held, what the node sends a replica (a connection whose client
// sent PSYNC) is kept in the proxy instead of forwarded, and dropped when
// the node dies. So a master killed while its stream is held dies with
// writes its replica never received, as a master cut off from its replica
// by the network does; stopping the replica process would not do that on
// loopback, where the kernel takes in what the master sends.
type replProxy struct {
	t      *testing.T
	ln     net.Listener
	target string

	mu    sync.Mutex
	held  bool
	links []*replLink
}

// replLink is one replication connection through the proxy.
type replLink struct {
	mu   sync.Mutex
	held [][]byte
	to   net.Conn
}

// startReplProxy listens on a free loopback port and forwards to target.
func startReplProxy(t *testing.T, target string) *replProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &replProxy{t: t, ln: ln, target: target}
	go p.serve()
	t.Cleanup(func() { ln.Close() })
	return p
}

// port is the proxy's port.
func (p *replProxy) port() string {
	_, port, _ := net.SplitHostPort(p.ln.Addr().String())
	return port
}

func (p *replProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.forward(c)
	}
}

// forward copies c to the node and back; once c has sent PSYNC it is a
// replication link, whose node-to-replica bytes are held while p is.
func (p *replProxy) forward(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	link := &replLink{to: c}
	var isRepl sync.Once
	markRepl := func() {
		isRepl.Do(func() {
			p.mu.Lock()
			p.links = append(p.links, link)
			p.mu.Unlock()
		})
	}
	done := make(chan struct{}, 2)
	go func() { // client to node
		buf := make([]byte, 32<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if bytes.Contains(buf[:n], []byte("PSYNC")) || bytes.Contains(buf[:n], []byte("psync")) {
					markRepl()
				}
				if _, werr := s.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}()
	go func() { // node to client
		buf := make([]byte, 32<<10)
		for {
			n, err := s.Read(buf)
			if n > 0 && !p.keep(link, buf[:n]) {
				if _, werr := c.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}()
	<-done
}

// keep holds b for link when p holds its replication links, reporting
// whether it did.
func (p *replProxy) keep(link *replLink, b []byte) bool {
	p.mu.Lock()
	held := p.held && p.isLink(link)
	p.mu.Unlock()
	if !held {
		return false
	}
	link.mu.Lock()
	link.held = append(link.held, bytes.Clone(b))
	link.mu.Unlock()
	return true
}

func (p *replProxy) isLink(link *replLink) bool {
	for _, l := range p.links {
		if l == link {
			return true
		}
	}
	return false
}

// hold starts holding what the node sends its replicas.
func (p *replProxy) hold() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

// drop stops holding and throws away what was held: the node is dead,
// and its replicas never get it.
func (p *replProxy) drop() {
	p.mu.Lock()
	p.held = false
	links := p.links
	p.links = nil
	p.mu.Unlock()
	for _, l := range links {
		l.mu.Lock()
		l.held = nil
		l.mu.Unlock()
		l.to.Close() // the link to the dead node ends
	}
}
