package testenv_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/jackc/pgx/v5"
	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testenv"
)

// Smoke tests: one per server, each over a real connection with the client
// library the project uses for it.

func ctx(t *testing.T) context.Context {
	t.Helper()
	c, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return c
}

func TestValkey(t *testing.T) {
	t.Parallel()
	opt, err := valkey.ParseURL(testenv.ValkeyURL(t))
	if err != nil {
		t.Fatalf("parse %s: %v", testenv.EnvValkeyURL, err)
	}
	client, err := valkey.NewClient(opt)
	if err != nil {
		t.Fatalf("connect to Valkey: %v", err)
	}
	t.Cleanup(client.Close)
	c := ctx(t)

	pong, err := client.Do(c, client.B().Ping().Build()).ToString()
	if err != nil || pong != "PONG" {
		t.Fatalf("PING = %q, %v; want PONG", pong, err)
	}

	key := testenv.UniqueName(t, "pyrula-test-stream")
	t.Cleanup(func() {
		if err := client.Do(context.Background(), client.B().Del().Key(key).Build()).Error(); err != nil {
			t.Errorf("DEL %s: %v", key, err)
		}
	})
	if err := client.Do(c, client.B().XgroupCreate().Key(key).Group("g").Id("$").Mkstream().Build()).Error(); err != nil {
		t.Fatalf("XGROUP CREATE: %v", err)
	}
	id, err := client.Do(c, client.B().Xadd().Key(key).Id("*").FieldValue().FieldValue("case", "42").Build()).ToString()
	if err != nil {
		t.Fatalf("XADD: %v", err)
	}
	read, err := client.Do(c, client.B().Xreadgroup().Group("g", "c1").Count(10).Block(1000).
		Streams().Key(key).Id(">").Build()).AsXRead()
	if err != nil {
		t.Fatalf("XREADGROUP: %v", err)
	}
	entries := read[key]
	if len(entries) != 1 || entries[0].ID != id || entries[0].FieldValues["case"] != "42" {
		t.Fatalf("XREADGROUP = %+v; want one entry %s with case=42", read, id)
	}
	acked, err := client.Do(c, client.B().Xack().Key(key).Group("g").Id(id).Build()).AsInt64()
	if err != nil || acked != 1 {
		t.Fatalf("XACK = %d, %v; want 1", acked, err)
	}
}

// TestValkeyCluster checks the test cluster: a cluster client, every node
// in cluster_state:ok, keys spread over more than one node, the server
// refusing a command whose keys are in two slots, and ScanKeys and
// DeleteNamespace seeing every node.
func TestValkeyCluster(t *testing.T) {
	t.Parallel()
	c := testenv.ValkeyClusterClient(t)
	cx := ctx(t)
	nodes := c.Nodes()
	if len(nodes) < 3 {
		t.Fatalf("%d nodes, want the three masters at least", len(nodes))
	}
	for addr, n := range nodes {
		info, err := n.Do(cx, n.B().ClusterInfo().Build()).ToString()
		if err != nil || !strings.Contains(info, "cluster_state:ok") {
			t.Fatalf("CLUSTER INFO on %s = %.60q, %v; want cluster_state:ok", addr, info, err)
		}
	}

	ns := testenv.UniqueName(t, "pyrula-test-cluster")
	const n = 64
	want := make([]string, n)
	cmds := make(valkey.Commands, n)
	for i := range n {
		want[i] = fmt.Sprintf("%s:k%02d", ns, i)
		cmds[i] = c.B().Set().Key(want[i]).Value("v").Build()
	}
	t.Cleanup(func() { _ = testenv.DeleteNamespace(context.Background(), c, ns) })
	for i, r := range c.DoMulti(cx, cmds...) {
		if err := r.Error(); err != nil {
			t.Fatalf("SET %s: %v", want[i], err)
		}
	}
	holding := 0
	for addr, node := range nodes {
		keys, err := testenv.ScanKeys(cx, node, ns+":*")
		if err != nil {
			t.Fatalf("SCAN on %s: %v", addr, err)
		}
		if len(keys) > 0 {
			holding++
		}
	}
	if holding < 2 {
		t.Fatalf("%d nodes hold the %d keys, want them spread over several", holding, n)
	}
	// Sent to one node as it is (its keys as plain arguments, which the
	// client neither checks nor routes), a command over two slots is
	// refused by the server.
	slot := func(key string) int64 {
		s, err := c.Do(cx, c.B().ClusterKeyslot().Key(key).Build()).AsInt64()
		if err != nil {
			t.Fatalf("CLUSTER KEYSLOT %s: %v", key, err)
		}
		return s
	}
	other := 1
	for slot(want[other]) == slot(want[0]) {
		other++
	}
	for _, node := range nodes {
		err := node.Do(cx, node.B().Arbitrary("DEL").Args(want[0], want[other]).Build()).Error()
		if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
			t.Fatalf("DEL of two keys in two slots = %v, want CROSSSLOT", err)
		}
		break
	}
	got, err := testenv.ScanKeys(cx, c, ns+":*")
	if err != nil || strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("ScanKeys = %v, %v; want the %d keys", got, err, n)
	}
	if err := testenv.DeleteNamespace(cx, c, ns); err != nil {
		t.Fatal(err)
	}
	if got, err := testenv.ScanKeys(cx, c, ns+":*"); err != nil || len(got) != 0 {
		t.Fatalf("after DeleteNamespace: %v, %v; want no key", got, err)
	}
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	conn, err := pgx.Connect(c, testenv.PostgresDSN(t))
	if err != nil {
		t.Fatalf("connect to PostgreSQL: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })

	var one int
	if err := conn.QueryRow(c, "select 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("select 1 = %d, %v", one, err)
	}
	if _, err := conn.Exec(c, "create temp table smoke (id bigint primary key, body bytea not null)"); err != nil {
		t.Fatalf("create temp table: %v", err)
	}
	if _, err := conn.Exec(c, "insert into smoke (id, body) values ($1, $2)", 7, []byte("bundle")); err != nil {
		t.Fatalf("insert: %v", err)
	}
	var body []byte
	if err := conn.QueryRow(c, "select body from smoke where id = $1", 7).Scan(&body); err != nil || string(body) != "bundle" {
		t.Fatalf("select body = %q, %v", body, err)
	}
}

// TestS3 also checks that the server honours If-None-Match: * on PutObject:
// some S3 emulators ignore conditional headers, and the fixture store's
// put-if-absent relies on a real 412.
func TestS3(t *testing.T) {
	t.Parallel()
	env := testenv.S3(t)
	c := ctx(t)
	cfg, err := config.LoadDefaultConfig(c,
		config.WithRegion(env.Region),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(env.AccessKey, env.SecretKey, "")),
	)
	if err != nil {
		t.Fatalf("load AWS config: %v", err)
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(env.Endpoint)
		o.UsePathStyle = true
	})

	bucket := testenv.UniqueName(t, "pyrula-smoke")
	if _, err := client.CreateBucket(c, &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatalf("CreateBucket %s at %s: %v", bucket, env.Endpoint, err)
	}
	key := "bundles/smoke"
	t.Cleanup(func() {
		bg := context.Background()
		if _, err := client.DeleteObject(bg, &s3.DeleteObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)}); err != nil {
			t.Errorf("DeleteObject: %v", err)
		}
		if _, err := client.DeleteBucket(bg, &s3.DeleteBucketInput{Bucket: aws.String(bucket)}); err != nil {
			t.Errorf("DeleteBucket: %v", err)
		}
	})

	put := func(body string) error {
		_, err := client.PutObject(c, &s3.PutObjectInput{
			Bucket:      aws.String(bucket),
			Key:         aws.String(key),
			Body:        bytes.NewReader([]byte(body)),
			IfNoneMatch: aws.String("*"),
		})
		return err
	}
	if err := put("first"); err != nil {
		t.Fatalf("first PutObject with If-None-Match: *: %v", err)
	}
	err = put("second")
	var respErr *smithyhttp.ResponseError
	if !errors.As(err, &respErr) || respErr.HTTPStatusCode() != http.StatusPreconditionFailed {
		t.Fatalf("second PutObject with If-None-Match: * = %v; want HTTP 412 (the server must honour conditional writes)", err)
	}
	var apiErr smithy.APIError
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "PreconditionFailed" {
		t.Errorf("second PutObject error code = %v; want PreconditionFailed", err)
	}

	out, err := client.GetObject(c, &s3.GetObjectInput{Bucket: aws.String(bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("GetObject: %v", err)
	}
	defer out.Body.Close()
	got, err := io.ReadAll(out.Body)
	if err != nil || string(got) != "first" {
		t.Fatalf("object body = %q, %v; want the first write to stay", got, err)
	}
}
