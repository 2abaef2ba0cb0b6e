package main_test

// Process-level tests of the worker's servers failing under it: Valkey down
// for 30 s under a steady load, the PostgreSQL archive and the S3 gateway
// unreachable (a TCP proxy in front of each, which the test cuts: every
// connection through it is closed and new ones are refused, a real
// connection loss), and the file system under the file store full (a
// small tmpfs, where the test may mount one).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/jackc/pgx/v5"
	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/testwait"
)

// tcpProxy forwards connections from a loopback port to a target address
// until cut, which closes every connection through it and stops accepting
// (a client then gets "connection refused"); restore accepts again on the
// same port.
type tcpProxy struct {
	t      *testing.T
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]bool
}

// startProxy starts a proxy to target; it is closed at the end of the test.
func startProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	p := &tcpProxy{t: t, target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.cut)
	return p
}

func (p *tcpProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pipe(c)
		}
	}()
}

// pipe forwards c to a new connection to the target, both ways.
func (p *tcpProxy) pipe(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // cut meanwhile
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = true, true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
	c.Close()
	up.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, up)
	p.mu.Unlock()
}

// cut closes the listener and every connection through the proxy.
func (p *tcpProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

// restore accepts connections again, on the same port.
func (p *tcpProxy) restore() {
	p.t.Helper()
	var ln net.Listener
	var err error
	testwait.Eventually(p.t, 10*time.Second, "listening again on "+p.addr, func() bool {
		ln, err = net.Listen("tcp", p.addr)
		return err == nil
	})
	p.serve(ln)
}

// metric reads the value of the series of name whose labels include
// labels (as `k="v"` strings) from the worker's /metrics; -1 when absent.
func (d *daemon) metric(name string, labels ...string) float64 {
	_, body, err := d.get("/metrics")
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(body, "\n") {
		series, v, ok := strings.Cut(l, " ")
		if !ok || (series != name && !strings.HasPrefix(series, name+"{")) {
			continue
		}
		match := true
		for _, lb := range labels {
			if !strings.Contains(series, lb) {
				match = false
			}
		}
		var f float64
		if _, err := fmt.Sscan(v, &f); match && err == nil {
			return f
		}
	}
	return -1
}

// ready reports whether the worker's /readyz answers 200.
func (d *daemon) ready() bool {
	code, _, err := d.get("/readyz")
	return err == nil && code == http.StatusOK
}

// TestValkeyDown30sUnderLoad: a private Redis (fsynced AOF) is killed
// under a steady load of start_run and delete_case_bundle messages and
// started again 30 s later. While it is down both workers report not
// ready; once it is back they are ready again within seconds, and every
// message the producer got accepted (before and after the outage) is
// answered, with every run finished exactly once.
func TestValkeyDown30sUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("a 30 s outage")
	}
	const outage = 30 * time.Second
	srv := startPrivateRedis(t)
	url := srv.url()
	ns := testenv.UniqueName(t, "wbroker")
	client := testenv.ValkeyClientAt(t, url, ns)
	env := []string{"PYRULA_FIXTURE_STORE=memory:", "PYRULA_CLAIM_IDLE=500ms", "PYRULA_RUN_LEASE=2s", "PYRULA_MAX_DELIVERIES=20"}
	workers := []*daemon{startReady(t, workerEnv(url, ns, "a", env...)...), startReady(t, workerEnv(url, ns, "b", env...)...)}

	// The producer sends a message every 50 ms; one the server does not
	// accept (it is down) is sent again until it is: only accepted
	// messages count as sent.
	var mu sync.Mutex
	sent := map[string]int{}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			id := fmt.Sprintf("o-%d", i)
			var m envelope
			if i%3 == 0 {
				m = checkoutRun(id, 0)
			} else {
				m = deleteBundle(id, fmt.Sprintf("%064x", i))
			}
			raw, _ := json.Marshal(m)
			for {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err := client.Do(ctx, client.B().Xadd().Key(ns+":case-messages").Id("*").FieldValue().FieldValue("message", string(raw)).Build()).Error()
				cancel()
				if err == nil {
					break
				}
				select {
				case <-stop:
					return
				case <-time.After(200 * time.Millisecond):
				}
			}
			mu.Lock()
			sent[id]++
			mu.Unlock()
		}
	}()
	stopProducer := func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		<-stopped
	}
	t.Cleanup(stopProducer)

	waitLen(t, client, ns+":case-replies", 30, 30*time.Second)
	srv.kill()
	down := time.Now()
	for i, d := range workers {
		testwait.Eventually(t, 15*time.Second, fmt.Sprintf("worker %d not ready while Valkey is down", i), func() bool {
			code, _, err := d.get("/readyz")
			return err == nil && code == http.StatusServiceUnavailable
		})
	}
	notReady := time.Since(down)
	time.Sleep(time.Until(down.Add(outage)))
	for i, d := range workers {
		if d.ready() {
			t.Errorf("worker %d ready at the end of the outage", i)
		}
	}
	srv.start()
	back := time.Now()
	for i, d := range workers {
		testwait.Eventually(t, 20*time.Second, fmt.Sprintf("worker %d ready after Valkey returned", i), d.ready)
	}
	readyAgain := time.Since(back)
	time.Sleep(3 * time.Second) // load after the outage too
	stopProducer()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("Valkey down %v: both workers not ready %v after the kill, ready again %v after the restart; %d messages sent",
		outage, notReady.Round(time.Millisecond), readyAgain.Round(time.Millisecond), len(sent))
	if readyAgain > 10*time.Second {
		t.Errorf("ready again only %v after Valkey returned, want within 10 s", readyAgain)
	}
	waitAllReplied(t, client, ns+":case-replies", sent, 90*time.Second)
	checkBurst(t, client, ns, sent, false)
	for i, d := range workers {
		select {
		case <-d.done:
			t.Errorf("worker %d exited: %v", i, d.err)
		default:
		}
	}
}

// TestArchiveUnreachableWhileRunsFinish: the connection to the PostgreSQL
// archive is lost (a proxy the test cuts: a real connection loss, short of
// restarting the shared server) while runs of triage sleep; they finish meanwhile,
// their archiving fails and their runs entries stay pending. Nothing is
// lost (the finished runs stay in Valkey, without an expiry), the worker
// logs why, and once the archive is reachable again every run is archived
// and its live keys get their expiry.
func TestArchiveUnreachableWhileRunsFinish(t *testing.T) {
	vurl := testenv.ValkeyURL(t)
	dsn := testenv.PostgresDSN(t)
	if r := run(t, 2*time.Minute, []string{"PYRULA_POSTGRES_DSN=" + dsn}, "db", "migrate"); r.code != 0 {
		t.Fatalf("migrate\n%s", r)
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	proxy := startProxy(t, u.Host)
	u.Host = proxy.addr
	ns := testenv.UniqueName(t, "wbroker")
	client := testenv.ValkeyClientAt(t, vurl, ns)
	d := startReady(t, workerEnv(vurl, ns, "a", "PYRULA_POSTGRES_DSN="+u.String(), "PYRULA_FIXTURE_STORE=memory:",
		"PYRULA_CLAIM_IDLE=500ms", "PYRULA_RUN_LEASE=2s", "PYRULA_MAX_DELIVERIES=20")...)

	const n = 4
	var msgs []any
	sent := map[string]int{}
	for i := range n {
		id := fmt.Sprintf("arch-%d", i)
		// triage sleeps snooze_ms and creates no child run (creating a
		// run checks the archive, so that a child would wait for it).
		msgs = append(msgs, envelope{MessageID: id, Type: "start_run", Body: map[string]any{
			"target_name": "triage", "inputs": map[string]any{"snooze_ms": 2000},
		}})
		sent[id] = 1
	}
	sendAll(t, client, ns+":case-messages", msgs)
	got, _ := readReplies(t, client, ns+":case-replies", "0", n, 20*time.Second)
	var runs []string
	for _, r := range got {
		if id := runResultID(r); id != "" {
			runs = append(runs, id)
		}
	}
	if len(runs) != n {
		t.Fatalf("replies %+v, want %d ok start_run", got, n)
	}
	testwait.Eventually(t, 15*time.Second, "every run sleeping", func() bool {
		for _, id := range runs {
			sleeping := false
			for _, e := range readJournal(t, client, ns, id).events {
				sleeping = sleeping || e.Kind == "call:start" && e.Call != nil && e.Call.Kind == "sleep"
			}
			if !sleeping {
				return false
			}
		}
		return true
	})

	proxy.cut()
	waitRunsFinished(t, client, ns, runs, 30*time.Second)
	testwait.Eventually(t, 20*time.Second, "the worker saying a finished run could not be archived", func() bool {
		return strings.Contains(d.logs(), "archive the finished run; left pending")
	})
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	archived := func() int {
		var c int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM archive.runs WHERE namespace = $1 AND run_id = ANY($2)`, ns, runs).Scan(&c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	if c := archived(); c != 0 {
		t.Fatalf("%d runs archived while the archive was unreachable", c)
	}
	for _, id := range runs {
		if ttl, _ := client.Do(t.Context(), client.B().Pttl().Key(ns+":{"+id+"}:meta").Build()).AsInt64(); ttl != -1 {
			t.Errorf("run %s: its live keys expire (PTTL %d) before it is archived", id, ttl)
		}
	}
	time.Sleep(3 * time.Second) // more attempts while it is down
	proxy.restore()
	back := time.Now()
	testwait.Eventually(t, 30*time.Second, "every run archived once the archive is back", func() bool { return archived() == n })
	t.Logf("the runs were archived %v after the archive was reachable again", time.Since(back).Round(time.Millisecond))
	waitNothingPending(t, client, ns, 30*time.Second)
	for _, id := range runs {
		if ttl, _ := client.Do(t.Context(), client.B().Pttl().Key(ns+":{"+id+"}:meta").Build()).AsInt64(); ttl <= 0 {
			t.Errorf("run %s: archived but its live keys do not expire (PTTL %d)", id, ttl)
		}
	}
	checkRuns(t, client, ns, runs)
	allReplies(t, client, ns+":case-replies").check(t, sent, true)
}

// seedRun runs checkout once through the worker and returns its run id,
// finished: what the save_case messages of the tests below capture.
func seedRun(t *testing.T, client valkey.Client, ns string) (runID, last string) {
	t.Helper()
	sendAll(t, client, ns+":case-messages", []any{checkoutRun("seed", 0)})
	got, last := readReplies(t, client, ns+":case-replies", "0", 1, 20*time.Second)
	runID = runResultID(got[0])
	if runID == "" {
		t.Fatalf("reply %+v, want an ok start_run", got[0])
	}
	waitRunsFinished(t, client, ns, []string{runID}, 20*time.Second)
	return runID, last
}

// saveMsg is a save_case of checkout run runID forked after seq.
func saveMsg(id, runID string, seq int) envelope {
	return envelope{MessageID: id, Type: "save_case", Body: map[string]any{"target_name": "checkout", "run_id": runID, "fork_after_seq": seq}}
}

// TestS3GatewayDownDuringSaves: the S3 gateway becomes unreachable (a
// proxy in front of it, cut) while save_case messages come in. A save
// fails transiently and is retried; it succeeds once the gateway is back,
// or, with the gateway down past PYRULA_MAX_DELIVERIES, is dead-lettered
// with the connection error. No object is ever visible for a save that
// failed.
func TestS3GatewayDownDuringSaves(t *testing.T) {
	vurl := testenv.ValkeyURL(t)
	s3env := testenv.S3(t)
	gw, err := url.Parse(s3env.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	s3c := s3.New(s3.Options{
		Region: s3env.Region, BaseEndpoint: aws.String(s3env.Endpoint), UsePathStyle: true,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: s3env.AccessKey, SecretAccessKey: s3env.SecretKey}, nil
		}),
	})
	objects := func(bucket string) []string {
		out, err := s3c.ListObjectsV2(t.Context(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
		if err != nil {
			t.Fatalf("list %s: %v", bucket, err)
		}
		var keys []string
		for _, o := range out.Contents {
			keys = append(keys, aws.ToString(o.Key))
		}
		return keys
	}
	setup := func(t *testing.T, maxDeliveries int) (valkey.Client, string, *tcpProxy, string, *daemon) {
		bucket := testenv.UniqueName(t, "pyrula-broker")
		if _, err := s3c.CreateBucket(t.Context(), &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
			t.Fatalf("CreateBucket: %v", err)
		}
		t.Cleanup(func() {
			for _, k := range objects(bucket) {
				s3c.DeleteObject(context.Background(), &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(k)})
			}
			s3c.DeleteBucket(context.Background(), &s3.DeleteBucketInput{Bucket: aws.String(bucket)})
		})
		proxy := startProxy(t, gw.Host)
		ns := testenv.UniqueName(t, "wbroker")
		client := testenv.ValkeyClientAt(t, vurl, ns)
		store := fmt.Sprintf("s3://%s/cases?region=%s&endpoint_url=http://%s", bucket, s3env.Region, proxy.addr)
		d := startReady(t, workerEnv(vurl, ns, "a", "PYRULA_FIXTURE_STORE="+store,
			"AWS_ACCESS_KEY_ID="+s3env.AccessKey, "AWS_SECRET_ACCESS_KEY="+s3env.SecretKey,
			"PYRULA_CLAIM_IDLE=200ms", fmt.Sprintf("PYRULA_MAX_DELIVERIES=%d", maxDeliveries))...)
		return client, ns, proxy, bucket, d
	}

	t.Run("retried until the gateway is back", func(t *testing.T) {
		client, ns, proxy, bucket, d := setup(t, 50)
		runID, last := seedRun(t, client, ns)
		proxy.cut()
		sendAll(t, client, ns+":case-messages", []any{saveMsg("s3-save", runID, 6)})
		testwait.Eventually(t, 30*time.Second, "save_case failing transiently, twice", func() bool {
			return d.metric("pyrula_worker_transient_failures_total", `type="save_case"`) >= 2
		})
		if keys := objects(bucket); len(keys) != 0 {
			t.Fatalf("objects %v visible while the gateway is unreachable", keys)
		}
		if n := streamLen(client, ns+":case-replies"); n != 1 {
			t.Fatalf("%d replies while the save cannot be stored, want only the seed's", n)
		}
		proxy.restore()
		got, _ := readReplies(t, client, ns+":case-replies", last, 1, 30*time.Second)
		if got[0].MessageID != "s3-save" || got[0].Status != "ok" {
			t.Fatalf("reply %+v, want s3-save ok", got[0])
		}
		var res struct {
			FixtureHash string `json:"fixture_hash"`
		}
		json.Unmarshal(got[0].Result, &res)
		if keys := objects(bucket); len(keys) != 1 || !strings.HasSuffix(keys[0], res.FixtureHash+".case") {
			t.Errorf("objects %v after the save, want the one bundle %s", keys, res.FixtureHash)
		}
		t.Logf("save_case answered ok after %v transient failures", d.metric("pyrula_worker_transient_failures_total", `type="save_case"`))
		waitNothingPending(t, client, ns, 10*time.Second)
	})

	t.Run("dead-lettered after the retry budget", func(t *testing.T) {
		const maxDeliveries = 3
		client, ns, proxy, bucket, _ := setup(t, maxDeliveries)
		runID, last := seedRun(t, client, ns)
		proxy.cut()
		sendAll(t, client, ns+":case-messages", []any{saveMsg("s3-dead", runID, 6)})
		got, _ := readReplies(t, client, ns+":case-replies", last, 1, 60*time.Second)
		r := got[0]
		if r.MessageID != "s3-dead" || r.Status != "error" || r.Code != "runtime_error" || !strings.Contains(r.Message, "dead-lettered") {
			t.Fatalf("reply %+v, want an error runtime_error naming the dead letter", r)
		}
		// The reply goes out before the dead letter is written.
		var dead []valkey.XRangeEntry
		testwait.Eventually(t, 10*time.Second, "the dead letter", func() bool {
			var err error
			dead, err = client.Do(t.Context(), client.B().Xrange().Key(ns+":case-messages:dead").Start("-").End("+").Build()).AsXRange()
			return err == nil && len(dead) > 0
		})
		if len(dead) != 1 {
			t.Fatalf("dead letters %v; want one", dead)
		}
		reason := dead[0].FieldValues["error"]
		if !strings.Contains(reason, "connection refused") || !strings.Contains(reason, "save") {
			t.Errorf("dead letter reason %q does not name the save and the refused connection", reason)
		}
		if dead[0].FieldValues["deliveries"] != fmt.Sprint(maxDeliveries) {
			t.Errorf("dead letter after %s deliveries, want %d", dead[0].FieldValues["deliveries"], maxDeliveries)
		}
		proxy.restore()
		if keys := objects(bucket); len(keys) != 0 {
			t.Errorf("objects %v in the bucket after a save that was dead-lettered", keys)
		}
		t.Logf("dead letter reason: %s", reason)
	})
}

// mountTmpfs mounts a tmpfs of size bytes on a new temp directory, or
// skips when this process may not mount (not root, or no CAP_SYS_ADMIN);
// the filestore package's own test injects ENOSPC instead.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d,mode=0700", size)); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v): the file store's ENOSPC handling is covered by store/filestore's injected test", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes a file into dir until the file system is full (ENOSPC).
func fill(t *testing.T, dir string) string {
	t.Helper()
	name := filepath.Join(dir, "filler")
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 4096)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill %s: %v", dir, err)
			}
			return name
		}
	}
}

// TestFileStoreOnAFullDisk: the file system under a directory fixture
// store (a 1 MiB tmpfs) is full when a save_case comes in. The save fails
// with an error naming ENOSPC, transiently: no bundle and no temp file are
// left in the store, and the message is retried; once space is freed the
// next attempt stores the bundle and the message is answered ok.
func TestFileStoreOnAFullDisk(t *testing.T) {
	vurl := testenv.ValkeyURL(t)
	dir := mountTmpfs(t, 1<<20)
	store := filepath.Join(dir, "cases")
	ns := testenv.UniqueName(t, "wbroker")
	client := testenv.ValkeyClientAt(t, vurl, ns)
	d := startReady(t, workerEnv(vurl, ns, "a", "PYRULA_FIXTURE_STORE="+store, "PYRULA_CLAIM_IDLE=200ms", "PYRULA_MAX_DELIVERIES=50")...)
	runID, last := seedRun(t, client, ns)
	filler := fill(t, dir)
	sendAll(t, client, ns+":case-messages", []any{saveMsg("full-save", runID, 6)})
	testwait.Eventually(t, 30*time.Second, "save_case failing with ENOSPC, twice", func() bool {
		return d.metric("pyrula_worker_transient_failures_total", `type="save_case"`) >= 2 && strings.Contains(d.logs(), "ENOSPC")
	})
	var left []string
	filepath.WalkDir(store, func(path string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			left = append(left, path)
		}
		return nil
	})
	if len(left) != 0 {
		t.Fatalf("files in the store while the disk is full: %v (a temp file or a partial bundle)", left)
	}
	for _, l := range strings.Split(d.logs(), "\n") {
		if strings.Contains(l, "ENOSPC") {
			t.Logf("the worker's log: %s", l)
			break
		}
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	got, _ := readReplies(t, client, ns+":case-replies", last, 1, 30*time.Second)
	if got[0].MessageID != "full-save" || got[0].Status != "ok" {
		t.Fatalf("reply %+v, want full-save ok", got[0])
	}
	if files := storeFiles(t, store); len(files) != 1 {
		t.Errorf("bundle files %v after the save, want one", files)
	}
	waitNothingPending(t, client, ns, 10*time.Second)
}
