package s3store

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"go.uber.org/goleak"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/internal/redact"
	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/store"
	"github.com/pyrula/caseworker/store/storetest"
)

// envPosixRoot names the Versity gateway's posix root directory, which
// scripts/test exports when it starts the gateway. Objects are files
// <root>/<bucket>/<key> there.
const envPosixRoot = "PYRULA_TEST_S3_POSIX_ROOT"

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// storeURL returns the URL of a store on bucket/prefix at the test gateway.
func storeURL(env testenv.S3Env, bucket, prefix string) string {
	return fmt.Sprintf("s3://%s/%s?region=%s&endpoint_url=%s", bucket, prefix, env.Region, env.Endpoint)
}

// newBucket creates a bucket of its own for t (testenv.FreshS3Bucket,
// which empties and deletes it when t ends) and returns a client with the
// tests' credentials, which only tests use.
func newBucket(t testing.TB, _ testenv.S3Env) (*s3.Client, string) {
	t.Helper()
	b := testenv.FreshS3Bucket(t, "pyrula-s3store")
	return b.Client, b.Name
}

// fixture is a store on a new bucket, and a client to reach behind it.
type fixture struct {
	env    testenv.S3Env
	client *s3.Client
	bucket string
	s      *Store
}

func setup(t testing.TB, prefix string, opts Options) fixture {
	t.Helper()
	env := testenv.S3(t)
	client, bucket := newBucket(t, env)
	s, err := Open(context.Background(), storeURL(env, bucket, prefix), opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return fixture{env: env, client: client, bucket: bucket, s: s}
}

func TestConformance(t *testing.T) {
	clock := storetest.NewClock(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	storetest.Run(t, func(t *testing.T) store.Store {
		return setup(t, "cases/prod", Options{Now: clock.Now}).s
	}, storetest.WithClock(clock), storetest.WithCorrupt(corrupt), storetest.WithLeaveTempFile(leaveTemp))
}

// TestConformanceRealClock runs the suite on time.Now, as in production,
// with a store at the bucket's root (no prefix) and a spool threshold so
// small that every Put goes through a temp file.
func TestConformanceRealClock(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store {
		return setup(t, "", Options{SpoolThreshold: 1024}).s
	}, storetest.WithCorrupt(corrupt), storetest.WithLeaveTempFile(leaveTemp))
}

// corrupt flips a byte in the middle of a stored object. With the
// gateway's posix root known (envPosixRoot) it does so in the backing
// file, behind the gateway's back, as a failing disk would; otherwise it
// overwrites the object through the API with an unconditional PutObject of
// the flipped bytes, keeping its metadata.
func corrupt(t *testing.T, st store.Store, hash bundle.Hash) {
	t.Helper()
	s := st.(*Store)
	key := s.Key(hash)
	if root := os.Getenv(envPosixRoot); root != "" {
		name := filepath.Join(root, s.bucket, filepath.FromSlash(key))
		f, err := os.OpenFile(name, os.O_RDWR, 0)
		if err != nil {
			t.Fatalf("corrupt: open the gateway's backing file: %v", err)
		}
		defer f.Close()
		fi, err := f.Stat()
		if err != nil {
			t.Fatal(err)
		}
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, fi.Size()/2); err != nil {
			t.Fatal(err)
		}
		b[0] ^= 0x20
		if _, err := f.WriteAt(b, fi.Size()/2); err != nil {
			t.Fatal(err)
		}
		return
	}
	ctx := t.Context()
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("corrupt: get: %v", err)
	}
	b, err := io.ReadAll(out.Body)
	out.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x20
	if _, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.bucket), Key: aws.String(key), Body: bytes.NewReader(b), Metadata: out.Metadata,
	}); err != nil {
		t.Fatalf("corrupt: put: %v", err)
	}
}

// leaveTemp leaves what an interrupted write leaves at S3: an unfinished
// multipart upload under the bundle's key (a PutObject that fails stores
// nothing at all), and a stray object near it that is not a bundle.
func leaveTemp(t *testing.T, st store.Store, hash bundle.Hash, partial []byte) {
	t.Helper()
	s := st.(*Store)
	ctx := t.Context()
	key := s.Key(hash)
	mpu, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		t.Fatalf("leaveTemp: CreateMultipartUpload: %v", err)
	}
	if _, err := s.client.UploadPart(ctx, &s3.UploadPartInput{
		Bucket: aws.String(s.bucket), Key: aws.String(key), UploadId: mpu.UploadId,
		PartNumber: aws.Int32(1), Body: bytes.NewReader(partial),
	}); err != nil {
		t.Fatalf("leaveTemp: UploadPart: %v", err)
	}
	t.Cleanup(func() {
		_, _ = s.client.AbortMultipartUpload(context.Background(), &s3.AbortMultipartUploadInput{
			Bucket: aws.String(s.bucket), Key: aws.String(key), UploadId: mpu.UploadId,
		})
	})
	stray := key + ".tmp-" + hex.EncodeToString([]byte{partial[0], byte(len(partial))})
	if _, err := s.client.PutObject(ctx, &s3.PutObjectInput{
		Bucket: aws.String(s.bucket), Key: aws.String(stray), Body: bytes.NewReader(partial),
	}); err != nil {
		t.Fatalf("leaveTemp: put %s: %v", stray, err)
	}
}

// TestGatewayAnswers412 checks that the server really refuses the second
// conditional PUT with 412: put-if-absent relies on it, and some S3
// emulators ignore If-None-Match.
func TestGatewayAnswers412(t *testing.T) {
	t.Parallel()
	f := setup(t, "p", Options{})
	ctx := t.Context()
	put := func(body string) error {
		_, err := f.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket: aws.String(f.bucket), Key: aws.String("p/x.case"),
			Body: strings.NewReader(body), IfNoneMatch: aws.String("*"),
		})
		return err
	}
	if err := put("first"); err != nil {
		t.Fatalf("first conditional PUT: %v", err)
	}
	err := put("second")
	if status(err) != http.StatusPreconditionFailed || !isPreconditionFailed(err) {
		t.Fatalf("second conditional PUT = %v (status %d, code %q); want 412 PreconditionFailed", err, status(err), code(err))
	}

	// And through the store: the second Put of a bundle meets a 412 (or finds
	// it first) and reports created=false, leaving the first bytes.
	c := storetest.Bundle(t, 7)
	var blob bytes.Buffer
	if err := c.WriteBlob(&blob); err != nil {
		t.Fatal(err)
	}
	if _, err := f.s.Put(ctx, c.Hash(), bytes.NewReader(blob.Bytes())); err != nil {
		t.Fatal(err)
	}
	// Bypass the refresh that finds the bundle: a raw conditional PutObject
	// of the spool is what Put sends when it races another save.
	sp, err := newSpool(ctx, bytes.NewReader(blob.Bytes()), 1<<20, "")
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	if err := f.s.putObject(ctx, f.s.Key(c.Hash()), sp); !isPreconditionFailed(err) {
		t.Fatalf("Put's conditional PutObject of a stored bundle = %v, want 412", err)
	}
}

// TestObjectLayout checks the key of a bundle and its metadata.
func TestObjectLayout(t *testing.T) {
	t.Parallel()
	f := setup(t, "/a/b/", Options{})
	if got, want := f.s.Identity(), "s3://"+f.bucket+"/a/b"; got != want {
		t.Errorf("Identity = %q, want %q", got, want)
	}
	c := storetest.Bundle(t, 2)
	if _, err := store.Save(t.Context(), f.s, c); err != nil {
		t.Fatal(err)
	}
	h := string(c.Hash())
	key := "a/b/" + h[:2] + "/" + h + ".case"
	out, err := f.client.HeadObject(t.Context(), &s3.HeadObjectInput{
		Bucket: aws.String(f.bucket), Key: aws.String(key), ChecksumMode: types.ChecksumModeEnabled,
	})
	if err != nil {
		t.Fatalf("HeadObject %s: %v", key, err)
	}
	if out.Metadata[metaUpdatedAt] == "" {
		t.Errorf("object has no %s metadata: %v", metaUpdatedAt, out.Metadata)
	}
	if aws.ToString(out.ChecksumSHA256) == "" {
		t.Errorf("object has no SHA-256 checksum")
	}
}

// TestChecksumRejectsWrongBytes checks that the server verifies the body
// against ChecksumSHA256: a body altered in flight is not stored.
func TestChecksumRejectsWrongBytes(t *testing.T) {
	t.Parallel()
	f := setup(t, "p", Options{})
	sp, err := newSpool(t.Context(), strings.NewReader("the right bytes"), 1<<20, "")
	if err != nil {
		t.Fatal(err)
	}
	defer sp.Close()
	_, err = f.client.PutObject(t.Context(), &s3.PutObjectInput{
		Bucket: aws.String(f.bucket), Key: aws.String("p/y"),
		Body: strings.NewReader("the wrong bytes"), ChecksumSHA256: aws.String(sp.sha256Base64()),
	})
	if err == nil {
		t.Fatal("PutObject with a wrong ChecksumSHA256 succeeded")
	}
}

func TestMissingBucket(t *testing.T) {
	t.Parallel()
	env := testenv.S3(t)
	bucket := testenv.UniqueName(t, "pyrula-missing")
	start := time.Now()
	s, err := Open(t.Context(), storeURL(env, bucket, "x"), Options{})
	if err == nil {
		s.Close()
		t.Fatal("Open of a missing bucket succeeded")
	}
	if !strings.Contains(err.Error(), "does not exist") || !strings.Contains(err.Error(), bucket) {
		t.Errorf("Open of a missing bucket: %v; want an error saying bucket %s does not exist", err, bucket)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Open of a missing bucket took %v", d)
	}
	assertNoSecrets(t, err.Error(), env)
}

func assertNoSecrets(t *testing.T, msg string, env testenv.S3Env) {
	t.Helper()
	if strings.Contains(msg, env.SecretKey) {
		t.Errorf("error shows the secret key: %s", msg)
	}
}

func TestRefusedURLs(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{
		"s3://AKIAEXAMPLE:s3cr3t@bucket/prefix",
		"s3://user@bucket/prefix",
		"s3://bucket/prefix?aws_secret_access_key=s3cr3t",
		"s3://bucket:9000/prefix",
		"s3://bucket/prefix?colour=blue",
		"s3://bucket/prefix?endpoint_url=ftp://host",
		"s3://bucket/prefix?endpoint_url=http://u:s3cr3t@host",
		"file:///tmp/x",
	} {
		s, err := Open(t.Context(), raw, Options{OpenTimeout: time.Second})
		if err == nil {
			s.Close()
			t.Errorf("Open(%q) succeeded", redact.Secrets(raw))
			continue
		}
		if !errors.Is(err, store.ErrInvalidURL) {
			t.Errorf("Open(%q) = %v, want ErrInvalidURL", redact.Secrets(raw), err)
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("Open(%q): error shows the secret: %v", redact.Secrets(raw), err)
		}
	}
}

// TestServerUnreachable: a store whose server does not answer fails within
// its context's deadline.
func TestServerUnreachable(t *testing.T) {
	t.Parallel()
	testenv.S3(t) // credentials in the environment
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	start := time.Now()
	s, err := Open(ctx, "s3://b/p?region=us-east-1&endpoint_url=http://"+addr, Options{})
	if err == nil {
		s.Close()
		t.Fatal("Open against a closed port succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Open against a closed port took %v: %v", d, err)
	}
}

// proxy forwards TCP connections to target until it is stopped; it can be
// started again on the same address, as a server that goes away and comes
// back.
type proxy struct {
	addr, target string
	mu           sync.Mutex
	l            net.Listener
	conns        map[net.Conn]bool
	wg           sync.WaitGroup
}

func (p *proxy) start(t *testing.T) {
	t.Helper()
	l, err := net.Listen("tcp", cmpString(p.addr, "127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.l, p.addr, p.conns = l, l.Addr().String(), map[net.Conn]bool{}
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", p.target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns[c], p.conns[u] = true, true
			p.mu.Unlock()
			p.wg.Go(func() { io.Copy(u, c); u.Close() })
			p.wg.Go(func() { io.Copy(c, u); c.Close() })
		}
	})
}

// stop closes the listener and every connection, and waits for the copies.
func (p *proxy) stop() {
	p.mu.Lock()
	p.l.Close()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

// hang keeps accepting connections but never answers: a server that hangs.
func hang(t *testing.T, addr string) func() {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	wg.Go(func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	})
	return func() {
		l.Close()
		wg.Wait()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}
}

func cmpString(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestServerGoesAway: with the server gone (connections cut, then a server
// that accepts and never answers) operations fail within their deadline,
// nothing partial is visible, and once the server is back the next
// operation succeeds.
func TestServerGoesAway(t *testing.T) {
	t.Parallel()
	env := testenv.S3(t)
	_, bucket := newBucket(t, env)
	p := &proxy{target: strings.TrimPrefix(strings.TrimPrefix(env.Endpoint, "http://"), "https://")}
	p.start(t)
	s, err := Open(t.Context(), fmt.Sprintf("s3://%s/p?region=%s&endpoint_url=http://%s", bucket, env.Region, p.addr), Options{})
	if err != nil {
		p.stop()
		t.Fatalf("Open through the proxy: %v", err)
	}
	defer s.Close()
	a, b := storetest.Bundle(t, 0), storetest.Bundle(t, 1)
	if _, err := store.Save(t.Context(), s, a); err != nil {
		p.stop()
		t.Fatalf("Save: %v", err)
	}

	p.stop()
	stopHang := hang(t, p.addr)
	for name, op := range map[string]func(ctx context.Context) error{
		"Save": func(ctx context.Context) error { _, err := store.Save(ctx, s, b); return err },
		"Stat": func(ctx context.Context) error { _, err := s.Stat(ctx, a.Hash()); return err },
		"Get": func(ctx context.Context) error {
			rc, err := store.Get(ctx, s, a.Hash())
			if err == nil {
				_, err = io.ReadAll(rc)
				rc.Close()
			}
			return err
		},
		"List": func(ctx context.Context) error {
			for _, err := range s.List(ctx) {
				return err
			}
			return nil
		},
	} {
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		start := time.Now()
		err := op(ctx)
		cancel()
		if err == nil {
			t.Errorf("%s with the server hanging succeeded", name)
		} else if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("%s with the server hanging: %v, want an error wrapping context.DeadlineExceeded", name, err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s with the server hanging took %v", name, d)
		}
	}
	stopHang()

	p.start(t) // the server is back, on the same address
	defer p.stop()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := s.Stat(ctx, b.Hash()); !errors.Is(err, store.ErrNotFound) {
		t.Errorf("Stat of the bundle whose Save failed: %v, want ErrNotFound (nothing partial)", err)
	}
	if created, err := store.Save(ctx, s, b); err != nil || !created {
		t.Errorf("Save after the server came back: created=%v err=%v", created, err)
	}
	rc, err := store.Get(ctx, s, a.Hash())
	if err != nil {
		t.Fatalf("Get after the server came back: %v", err)
	}
	defer rc.Close()
	if _, err := io.Copy(io.Discard, rc); err != nil {
		t.Errorf("reading after the server came back: %v", err)
	}
}

// TestLargeBlobStreams puts and gets a 64 MiB blob with a small spool
// threshold, and checks the bytes.
func TestLargeBlobStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("-short")
	}
	t.Parallel()
	f := setup(t, "big", Options{})
	data := make([]byte, 64<<20)
	rand.Read(data)
	hash := fakeHash(0)
	if created, err := f.s.Put(t.Context(), hash, bytes.NewReader(data)); err != nil || !created {
		t.Fatalf("Put 64 MiB: created=%v err=%v", created, err)
	}
	rc, err := f.s.Open(t.Context(), hash)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	h := sha256.New()
	if _, err := io.Copy(h, rc); err != nil {
		t.Fatal(err)
	}
	if want := sha256.Sum256(data); !bytes.Equal(h.Sum(nil), want[:]) {
		t.Fatal("the 64 MiB blob read back differs")
	}
}

// fakeHash returns a valid hash for benchmarks and tests that store raw
// bytes: Put does not verify.
func fakeHash(i int) bundle.Hash {
	sum := sha256.Sum256(fmt.Appendf(nil, "s3store %d %s", i, rand.Text()))
	return bundle.Hash(hex.EncodeToString(sum[:]))
}

// BenchmarkPut and BenchmarkGet measure throughput (b.SetBytes: MB/s) of
// 1 MiB and 64 MiB blobs against the gateway.
func BenchmarkPut(b *testing.B) {
	for _, size := range []int{1 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			f := setup(b, "bench", Options{})
			data := make([]byte, size)
			rand.Read(data)
			b.SetBytes(int64(size))
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if _, err := f.s.Put(context.Background(), fakeHash(i), bytes.NewReader(data)); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkGet(b *testing.B) {
	for _, size := range []int{1 << 20, 64 << 20} {
		b.Run(fmt.Sprintf("%dMiB", size>>20), func(b *testing.B) {
			f := setup(b, "bench", Options{})
			data := make([]byte, size)
			rand.Read(data)
			hash := fakeHash(size)
			if _, err := f.s.Put(context.Background(), hash, bytes.NewReader(data)); err != nil {
				b.Fatal(err)
			}
			b.SetBytes(int64(size))
			for b.Loop() {
				rc, err := f.s.Open(context.Background(), hash)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, rc)
				rc.Close()
				if err != nil || n != int64(size) {
					b.Fatalf("read %d bytes: %v", n, err)
				}
			}
		})
	}
}

// fakeS3 is a minimal S3 server for the logic that the gateway cannot
// provoke: 501 for conditional writes and 409 conflicts. It keeps one
// object per key and counts requests.
type fakeS3 struct {
	mu          sync.Mutex
	objects     map[string][]byte
	conflicts   int  // conditional PUTs to answer with 409 first
	noCondition bool // answer 501 to If-None-Match
	condPuts    int
	plainPuts   int
}

func (f *fakeS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fail := func(status int, code string) {
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(status)
		fmt.Fprintf(w, "<Error><Code>%s</Code><Message>%s</Message></Error>", code, code)
	}
	key := r.URL.Path
	if strings.Count(key, "/") < 2 { // the bucket itself
		w.WriteHeader(http.StatusOK)
		return
	}
	body, ok := f.objects[key]
	switch {
	case r.Method == http.MethodHead:
		if !ok {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(body)))
		w.Header().Set("Last-Modified", time.Now().UTC().Format(http.TimeFormat))
	case r.Method == http.MethodPut && r.Header.Get("X-Amz-Copy-Source") != "":
		if !ok {
			fail(http.StatusNotFound, "NoSuchKey")
			return
		}
		fmt.Fprint(w, "<CopyObjectResult><ETag>\"x\"</ETag></CopyObjectResult>")
	case r.Method == http.MethodPut:
		if r.Header.Get("If-None-Match") != "" {
			f.condPuts++
			if f.noCondition {
				fail(http.StatusNotImplemented, "NotImplemented")
				return
			}
			if f.conflicts > 0 {
				f.conflicts--
				fail(http.StatusConflict, "ConditionalRequestConflict")
				return
			}
			if ok {
				fail(http.StatusPreconditionFailed, "PreconditionFailed")
				return
			}
		} else {
			f.plainPuts++
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			fail(http.StatusBadRequest, "IncompleteBody")
			return
		}
		f.objects[key] = b
	default:
		fail(http.StatusNotImplemented, "NotImplemented")
	}
}

func openFake(t *testing.T, f *fakeS3) *Store {
	t.Helper()
	t.Setenv("AWS_ACCESS_KEY_ID", "fake")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "fake")
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	s, err := Open(t.Context(), "s3://b/p?region=us-east-1&endpoint_url="+srv.URL, Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConditionalWriteFallback: a server that answers 501 to If-None-Match
// gets HEAD-then-PUT, and put-if-absent still holds.
func TestConditionalWriteFallback(t *testing.T) {
	f := &fakeS3{objects: map[string][]byte{}, noCondition: true}
	s := openFake(t, f)
	h := fakeHash(1)
	for i, want := range []bool{true, false} {
		created, err := s.Put(t.Context(), h, strings.NewReader("blob"))
		if err != nil || created != want {
			t.Fatalf("Put #%d: created=%v err=%v, want %v", i, created, err, want)
		}
	}
	if f.condPuts != 1 || f.plainPuts != 1 {
		t.Errorf("conditional PUTs %d, plain PUTs %d; want 1 and 1 (one 501, then HEAD-then-PUT)", f.condPuts, f.plainPuts)
	}
}

// TestConflictRetried: 409 ConditionalRequestConflict is retried.
func TestConflictRetried(t *testing.T) {
	f := &fakeS3{objects: map[string][]byte{}, conflicts: 2}
	s := openFake(t, f)
	created, err := s.Put(t.Context(), fakeHash(2), strings.NewReader("blob"))
	if err != nil || !created {
		t.Fatalf("Put: created=%v err=%v, want true", created, err)
	}
	if f.condPuts != 3 {
		t.Errorf("conditional PUTs %d, want 3 (two 409s, then success)", f.condPuts)
	}
	f.conflicts = 100
	if _, err := s.Put(t.Context(), fakeHash(3), strings.NewReader("blob")); !isConflict(err) {
		t.Errorf("Put against endless 409s: %v, want the conflict after a few retries", err)
	}
}

// TestListPages: List follows ListObjectsV2's continuation across pages and
// skips keys under the prefix that are not bundles.
func TestListPages(t *testing.T) {
	t.Parallel()
	f := setup(t, "pages", Options{})
	f.s.pageSize = 2
	want := map[bundle.Hash]bool{}
	for i := range 7 {
		c := storetest.Bundle(t, i)
		if _, err := store.Save(t.Context(), f.s, c); err != nil {
			t.Fatal(err)
		}
		want[c.Hash()] = true
	}
	h := string(fakeHash(99))
	for _, key := range []string{"pages/README", "pages/" + h + ".case", "pages/00/" + h + ".case", "other/" + h[:2] + "/" + h + ".case"} {
		if _, err := f.client.PutObject(t.Context(), &s3.PutObjectInput{
			Bucket: aws.String(f.bucket), Key: aws.String(key), Body: strings.NewReader("x"),
		}); err != nil {
			t.Fatal(err)
		}
	}
	got := map[bundle.Hash]bool{}
	for info, err := range f.s.List(t.Context()) {
		if err != nil {
			t.Fatalf("List: %v", err)
		}
		if got[info.Hash] || !want[info.Hash] {
			t.Errorf("List yielded %s (twice or not stored)", info.Hash.Short())
		}
		got[info.Hash] = true
	}
	if len(got) != len(want) {
		t.Errorf("List yielded %d bundles, want %d", len(got), len(want))
	}
}
