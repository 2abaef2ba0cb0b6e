package main_test

// The failover trial (docs/reliability.md): the kill trial's load and
// checks against a private Redis Cluster of three masters with a replica
// each, whose masters are SIGKILLed in turn so that their replicas are
// promoted, while the workers wait for a replica on every reply
// (PYRULA_WAIT_REPLICAS=1).

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
)

var (
	failovers       = flag.Int("failovers", 0, "TestFailoverTrial: fail over this many masters (a long trial) instead of the bounded default")
	failoverReplica = flag.Int("failover-wait-replicas", 1, "TestFailoverTrial: the workers' PYRULA_WAIT_REPLICAS (0: see what a failover loses without it)")
)

// boundedFailovers is how many masters TestFailoverTrial kills by default.
const boundedFailovers = 5

// replicatedCluster is a private Redis Cluster of the test's own: three
// masters with a replica each, on loopback, with a one-second node timeout
// so that a dead master's replica is promoted within seconds.
type replicatedCluster struct {
	t     *testing.T
	nodes []*privateRedis
	// proxies are the nodes' client ports, by node port: each node
	// announces its proxy's port, so that clients and replicas go through
	// it and a replication stream can be cut (replProxy).
	proxies map[string]*replProxy
	conns   map[string]valkey.Client // by port: one connection to each node
}

// startReplicatedCluster starts the six nodes, joins them with redis-cli
// (three masters, one replica each) and waits until every master has its
// replica in sync.
func startReplicatedCluster(t *testing.T) *replicatedCluster {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		if testenv.Required() {
			t.Fatal("redis-cli not found: the failover trial builds a Redis Cluster with it")
		}
		t.Skip("redis-cli not found: skipping the failover trial")
	}
	c := &replicatedCluster{t: t, conns: map[string]valkey.Client{}, proxies: map[string]*replProxy{}}
	var addrs []string
	for range 6 {
		port := clusterPort(t)
		bus, _ := strconv.Atoi(port)
		proxy := startReplProxy(t, "127.0.0.1:"+port)
		c.proxies[port] = proxy
		r := newPrivateRedis(t, port, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000", "--appendonly", "no",
			"--cluster-announce-ip", "127.0.0.1", "--cluster-announce-port", proxy.port(), "--cluster-announce-bus-port", strconv.Itoa(bus+10000))
		r.start()
		c.nodes = append(c.nodes, r)
		addrs = append(addrs, "127.0.0.1:"+port)
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...), "--cluster-replicas", "1", "--cluster-yes")...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli --cluster create: %v\n%s", err, out)
	}
	c.waitHealthy(60 * time.Second)
	return c
}

// clusterPort returns a free loopback port whose cluster bus port (10000
// above it) is free too.
func clusterPort(t *testing.T) string {
	t.Helper()
	for range 50 {
		port := closedPort(t)
		n, _ := strconv.Atoi(port)
		if n+10000 > 65535 {
			continue
		}
		ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(n+10000))
		if err != nil {
			continue
		}
		ln.Close()
		return port
	}
	t.Fatal("no port with a free cluster bus port")
	return ""
}

// url is the cluster's URL for the workers, naming every node by the port
// it announces (its proxy's).
func (c *replicatedCluster) url() string {
	u := "redis://127.0.0.1:" + c.proxies[c.nodes[0].port].port()
	for i, n := range c.nodes[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=127.0.0.1:" + c.proxies[n.port].port()
	}
	return u
}

// conn is a connection to node r alone.
func (c *replicatedCluster) conn(r *privateRedis) valkey.Client {
	if cl, ok := c.conns[r.port]; ok {
		return cl
	}
	cl, err := valkey.NewClient(valkey.ClientOption{InitAddress: []string{"127.0.0.1:" + r.port}, ForceSingleClient: true,
		DisableCache: true, DisableRetry: true, ConnWriteTimeout: 2 * time.Second})
	if err != nil {
		c.t.Fatalf("connect to node %s: %v", r.port, err)
	}
	c.conns[r.port] = cl
	c.t.Cleanup(cl.Close)
	return cl
}

// role is node r's ROLE: "master" with its replicas in sync (connected
// and at its offset), or "slave" with its link's state.
func (c *replicatedCluster) role(r *privateRedis) (role string, synced int, link string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	vs, err := c.conn(r).Do(ctx, c.conn(r).B().Role().Build()).ToArray()
	if err != nil || len(vs) < 3 {
		return "", 0, ""
	}
	role, _ = vs[0].ToString()
	switch role {
	case "master":
		offset, _ := vs[1].AsInt64()
		replicas, _ := vs[2].ToArray()
		for _, rep := range replicas {
			f, _ := rep.ToArray()
			if len(f) == 3 {
				if s, _ := f[2].ToString(); s == strconv.FormatInt(offset, 10) || offset == 0 {
					synced++
				}
			}
		}
	case "slave":
		if len(vs) >= 4 {
			link, _ = vs[3].ToString()
		}
	}
	return role, synced, link
}

// clusterOK reports whether node r says the cluster is in state ok.
func (c *replicatedCluster) clusterOK(r *privateRedis) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := c.conn(r).Do(ctx, c.conn(r).B().ClusterInfo().Build()).ToString()
	return err == nil && strings.Contains(info, "cluster_state:ok")
}

// waitHealthy waits until every node says the cluster is ok, three nodes
// are masters with one replica in sync each and the three others replicas
// with their link up.
func (c *replicatedCluster) waitHealthy(within time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(within)
	for {
		var state []string
		masters, replicas, ok := 0, 0, 0
		for _, r := range c.nodes {
			role, synced, link := c.role(r)
			healthy := c.clusterOK(r)
			state = append(state, fmt.Sprintf("node %s: %s, replicas in sync %d, link %q, cluster ok %v", r.port, role, synced, link, healthy))
			if healthy {
				ok++
			}
			switch {
			case role == "master" && synced == 1:
				masters++
			case role == "slave" && link == "connected":
				replicas++
			}
		}
		if ok == len(c.nodes) && masters == 3 && replicas == 3 {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("the cluster did not get three masters, each with a replica in sync, within %v:\n%s", within, strings.Join(state, "\n"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// replicate waits until the replica of master r has everything r had
// (a key of one of r's slots written, then WAIT for one replica on the same
// connection): what the trial itself sent (its messages, which a platform
// would make durable with a WAIT of its own) is not lost with r. What the
// workers write after it is theirs to protect.
func (c *replicatedCluster) replicate(r *privateRedis) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn := c.conn(r)
	for i := 0; ; i++ { // a key of one of r's slots, found by trying
		key := fmt.Sprintf("failover-barrier-{%d}", i)
		err := conn.Do(ctx, conn.B().Set().Key(key).Value("1").Px(time.Minute).Build()).Error()
		if err == nil {
			break
		}
		if !strings.HasPrefix(err.Error(), "MOVED") || i > 1000 {
			c.t.Fatalf("write a key of node %s: %v", r.port, err)
		}
	}
	n, err := conn.Do(ctx, conn.B().Wait().Numreplicas(1).Timeout(5000).Build()).AsInt64()
	if err != nil || n < 1 {
		c.t.Fatalf("WAIT 1 on node %s before killing it: %d, %v", r.port, n, err)
	}
}

// replicaOf is the node that replicates master r.
func (c *replicatedCluster) replicaOf(r *privateRedis) *privateRedis {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	vs, err := c.conn(r).Do(ctx, c.conn(r).B().Role().Build()).ToArray()
	if err == nil && len(vs) == 3 {
		replicas, _ := vs[2].ToArray()
		for _, rep := range replicas {
			f, _ := rep.ToArray()
			if len(f) == 3 {
				port, _ := f[1].ToString() // its own port, as it told the master
				for _, n := range c.nodes {
					if n.port == port || c.proxies[n.port].port() == port {
						return n
					}
				}
			}
		}
	}
	c.t.Fatalf("master %s has no replica (%v)", r.port, err)
	return nil
}

// failover cuts one master's replication stream for stall, SIGKILLs the
// master, waits until its replica is promoted and the cluster is ok again,
// then restarts the killed node (it rejoins as the new master's replica)
// and waits until it is in sync. It returns how long the shard had no
// master.
func (c *replicatedCluster) failover(pick int, stall time.Duration) time.Duration {
	c.t.Helper()
	var masters []*privateRedis
	for _, r := range c.nodes {
		if role, _, _ := c.role(r); role == "master" {
			masters = append(masters, r)
		}
	}
	if len(masters) != 3 {
		c.t.Fatalf("%d masters before a failover", len(masters))
	}
	dead := masters[pick%len(masters)]
	c.replicate(dead)
	// Its replication stream is cut for stall while the workers go on
	// writing to the master (the trial sends nothing meanwhile): every
	// WAIT on the shard blocks, and what the master takes in then is lost
	// with it.
	c.replicaOf(dead) // it has one
	proxy := c.proxies[dead.port]
	proxy.hold()
	time.Sleep(stall)
	killed := time.Now()
	dead.kill()
	proxy.drop()
	c.conn(dead).Close()
	delete(c.conns, dead.port)
	var promoted time.Duration
	testwait.Eventually(c.t, 30*time.Second, "a replica promoted in place of the killed master", func() bool {
		n := 0
		for _, r := range c.nodes {
			if r == dead {
				continue
			}
			if role, _, _ := c.role(r); role == "master" && c.clusterOK(r) {
				n++
			}
		}
		promoted = time.Since(killed)
		return n == 3
	})
	dead.start()
	c.waitHealthy(60 * time.Second)
	return promoted
}

// TestFailoverTrial: the kill trial's mixed load (messages, runs, case
// runs, suites, duplicates) on three workers with PYRULA_WAIT_REPLICAS=1
// against a Redis Cluster of three masters with a replica each, while a
// master is SIGKILLed and its replica promoted, five times (then the
// killed node rejoins as a replica). Then the kill trial's checks: every
// message answered, its replies identical, every run submitted once and
// ended once, no call done twice, nothing pending, no dead letters. Bounded
// by default; -failovers N runs a long trial.
func TestFailoverTrial(t *testing.T) {
	n := boundedFailovers
	if *failovers > 0 {
		n = *failovers
	}
	c := startReplicatedCluster(t)
	k := newKillTrial(t, c.url(), fmt.Sprintf("%d failovers of a master, PYRULA_WAIT_REPLICAS=%d", n, *failoverReplica),
		// A failover leaves its shard without a replica until the old
		// master rejoins, and every WAIT there fails meanwhile: with a
		// failover every few seconds a message may fail many deliveries
		// in a row, so the trial allows 8 (a backoff of about 95 s in all)
		// instead of 5 (15 s).
		fmt.Sprintf("PYRULA_WAIT_REPLICAS=%d", *failoverReplica), "PYRULA_WAIT_TIMEOUT=1s", "PYRULA_MAX_DELIVERIES=8")
	// Without waiting, a failover may lose what docs/operate.md lists: the
	// trial counts those losses and fails on anything else.
	k.lossesAllowed = *failoverReplica == 0
	var down []string
	for i := range n {
		k.load(500*time.Millisecond + time.Duration(k.rng.IntN(1500))*time.Millisecond)
		took := c.failover(k.rng.IntN(3), time.Duration(200+k.rng.IntN(600))*time.Millisecond)
		down = append(down, took.Round(10*time.Millisecond).String())
		t.Logf("failover %d: a replica promoted %v after its master was killed", i+1, took.Round(10*time.Millisecond))
	}
	k.load(time.Second)
	k.finish()
	if !t.Failed() {
		t.Logf("failover trial: %d failovers (the shard without a master for %s)", n, strings.Join(down, ", "))
	}
}
