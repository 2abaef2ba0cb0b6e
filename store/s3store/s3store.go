// Package s3store is the fixture store in an S3 bucket
// ("s3://bucket/prefix?region=…&endpoint_url=…"). Each bundle is one object
// holding its zstd blob:
//
//	<prefix>/<h[0:2]>/<hash>.case
//
// Credentials come only from the AWS SDK's default chain (environment,
// shared config and credentials files, SSO, web identity, container and
// instance roles); store.ParseURL refuses a URL that carries any. The query
// takes two parameters: region (else the chain's region) and endpoint_url,
// the base URL of an S3-compatible server (MinIO, Ceph, the Versity gateway),
// which also turns on path-style addressing, so that
// "s3://cases/prod?endpoint_url=http://127.0.0.1:7070" works.
//
// Blobs are streamed: Put spools a large blob to a temp file rather than
// memory (see spool), and Open returns GetObject's body as it arrives.
//
// Writes (see Put) are PutObject requests with "If-None-Match: *" and the
// SHA-256 checksum of the body, so the server stores a whole, verified
// object or nothing, and never replaces a stored bundle. A server that
// rejects conditional writes with 501 NotImplemented gets a HEAD-then-PUT
// instead, which two concurrent first saves of one bundle may both pass:
// they write the same bytes, so the result is still one correct copy.
//
// UpdatedAt is the object's "pyrula-updated-at" user metadata (RFC 3339 with
// nanoseconds, from Options.Now), written by the PUT that creates the bundle
// and refreshed by every later save with a metadata-only CopyObject of the
// object onto itself; an object without it (written by another tool) has
// its LastModified. List reads it with one HEAD per listed bundle, because
// ListObjectsV2 returns no user metadata.
//
// s3store imports store, bundle and internal/redact, nothing else of the project.
package s3store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/pyrula/caseworker/bundle"
	"github.com/pyrula/caseworker/internal/redact"
	"github.com/pyrula/caseworker/store"
)

var _ store.Store = (*Store)(nil)

const (
	suffix = ".case"
	// metaUpdatedAt is the user metadata key of UpdatedAt (sent as
	// "x-amz-meta-pyrula-updated-at").
	metaUpdatedAt = "pyrula-updated-at"
	// maxRounds bounds Put's loop of refresh and conditional PUT, which only
	// repeats when another process deletes or creates the bundle meanwhile.
	maxRounds = 8
	// maxConflicts bounds Put's retries of 409 ConditionalRequestConflict.
	maxConflicts = 5
)

// Defaults of Options.
const (
	DefaultOpenTimeout    = 30 * time.Second
	DefaultSpoolThreshold = 8 << 20 // 8 MiB
	defaultRegion         = "us-east-1"
)

// Options tune Open; zero fields take the defaults.
type Options struct {
	// Now is the clock that stamps UpdatedAt (time.Now when nil). Tests
	// inject a fake clock.
	Now func() time.Time
	// OpenTimeout bounds Open's check that the bucket exists, when ctx has
	// no earlier deadline (DefaultOpenTimeout, 30 s, when zero).
	OpenTimeout time.Duration
	// SpoolThreshold is the largest blob Put holds in memory before its
	// upload, in bytes (DefaultSpoolThreshold, 8 MiB, when zero); a larger
	// blob is spooled to a temp file in TempDir.
	SpoolThreshold int64
	// TempDir is where Put spools large blobs (os.TempDir() when empty).
	TempDir string
}

// Store is a fixture store in an S3 bucket. It is safe for concurrent use,
// also by several processes on the same bucket.
type Store struct {
	client    *s3.Client
	transport *http.Transport
	bucket    string
	prefix    string // without leading or trailing slashes; may be empty
	identity  string
	now       func() time.Time
	spoolMax  int64
	tempDir   string
	closed    atomic.Bool
	// Set once the server rejected a conditional request with 501
	// NotImplemented: Put then uses HEAD-then-PUT (noConditionalPut) and
	// DeleteBefore an unconditional delete (noConditionalDelete).
	noConditionalPut    atomic.Bool
	noConditionalDelete atomic.Bool
	// pageSize is List's MaxKeys (the server's default, 1000, when zero);
	// tests make it small to page.
	pageSize int32
}

// Open opens the fixture store that rawURL names
// ("s3://bucket/prefix?region=…&endpoint_url=…") and checks with HeadBucket
// that the bucket exists and the credentials may use it, within
// Options.OpenTimeout. Errors never show credentials.
func Open(ctx context.Context, rawURL string, opts Options) (*Store, error) {
	loc, err := store.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("s3store: open: %w", err)
	}
	if loc.Scheme != store.SchemeS3 {
		return nil, fmt.Errorf("s3store: open: %w %q: not an s3:// URL", store.ErrInvalidURL, redact.Secrets(rawURL))
	}
	fail := func(err error) (*Store, error) {
		return nil, fmt.Errorf("s3store: open %s: %w", loc.Identity, err)
	}
	u, err := url.Parse(strings.TrimSpace(rawURL))
	if err != nil { // ParseURL accepted it, so this does not happen
		return fail(store.ErrInvalidURL)
	}
	region, endpoint := "", ""
	for k, vs := range u.Query() {
		v := ""
		if len(vs) > 0 {
			v = vs[len(vs)-1]
		}
		switch k {
		case "region":
			region = v
		case "endpoint_url":
			endpoint = v
		default:
			return fail(fmt.Errorf("%w: unknown query parameter %q (want region or endpoint_url)", store.ErrInvalidURL, k))
		}
	}
	if endpoint != "" {
		e, err := url.Parse(endpoint)
		if err != nil || (e.Scheme != "http" && e.Scheme != "https") || e.Host == "" || e.User != nil {
			return fail(fmt.Errorf("%w: endpoint_url must be an http:// or https:// URL without credentials", store.ErrInvalidURL))
		}
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}

	// The SDK's own logger writes to stderr ("SDK … WARN …"); what matters
	// reaches the caller as the error, so it is silenced.
	loadOpts := []func(*config.LoadOptions) error{config.WithLogger(logging.Nop{})}
	if region != "" {
		loadOpts = append(loadOpts, config.WithRegion(region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return fail(fmt.Errorf("load AWS configuration: %w", err))
	}
	if cfg.Region == "" {
		if endpoint == "" {
			return fail(errors.New("no region: add ?region=… to the URL or set AWS_REGION"))
		}
		cfg.Region = defaultRegion // S3-compatible servers rarely care
	}
	// A client of the store's own, so that Close can close its connections:
	// the transport the SDK built from the chain's settings (a custom CA
	// bundle, proxies), with a dial timeout.
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient); ok {
		transport = bc.GetTransport()
	}
	transport.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	transport.MaxIdleConnsPerHost = 64
	httpClient := &http.Client{
		Transport:     transport,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.HTTPClient = httpClient
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
			o.UsePathStyle = true
		}
	})

	bucket := u.Host
	s := &Store{
		client:    client,
		transport: transport,
		bucket:    bucket,
		prefix:    strings.Trim(path.Clean("/"+u.Path), "/"),
		identity:  loc.Identity,
		now:       opts.Now,
		spoolMax:  opts.SpoolThreshold,
		tempDir:   opts.TempDir,
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.spoolMax <= 0 {
		s.spoolMax = DefaultSpoolThreshold
	}
	hctx, cancel := context.WithTimeout(ctx, cmpDuration(opts.OpenTimeout, DefaultOpenTimeout))
	defer cancel()
	if _, err := client.HeadBucket(hctx, &s3.HeadBucketInput{Bucket: aws.String(bucket)}); err != nil {
		transport.CloseIdleConnections()
		switch status(err) {
		case http.StatusNotFound:
			return fail(fmt.Errorf("bucket %q does not exist", bucket))
		case http.StatusForbidden:
			return fail(fmt.Errorf("access to bucket %q denied (check the credentials of the AWS SDK chain): %w", bucket, err))
		}
		return fail(fmt.Errorf("check bucket %q: %w", bucket, err))
	}
	return s, nil
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// Bucket returns the store's bucket.
func (s *Store) Bucket() string { return s.bucket }

// Key returns the object key of the bundle hash, which must be valid.
func (s *Store) Key(hash bundle.Hash) string {
	k := string(hash[:2]) + "/" + string(hash) + suffix
	if s.prefix != "" {
		k = s.prefix + "/" + k
	}
	return k
}

// listPrefix is the key prefix under which List looks.
func (s *Store) listPrefix() string {
	if s.prefix == "" {
		return ""
	}
	return s.prefix + "/"
}

// hashOfKey returns the hash of a key "<prefix>/<h[0:2]>/<hash>.case".
func (s *Store) hashOfKey(key string) (bundle.Hash, bool) {
	rest, ok := strings.CutPrefix(key, s.listPrefix())
	if !ok {
		return "", false
	}
	shard, name, ok := strings.Cut(rest, "/")
	if !ok {
		return "", false
	}
	h, ok := strings.CutSuffix(name, suffix)
	if !ok || !bundle.ValidHash(h) || shard != h[:2] {
		return "", false
	}
	return bundle.Hash(h), true
}

// status returns the HTTP status of an S3 error, or 0.
func status(err error) int {
	// An operation error inside the S3 one is another service's (the
	// credential chain's: ec2imds, sts, sso); its status is not S3's.
	var op *smithy.OperationError
	if errors.As(err, &op) {
		var inner *smithy.OperationError
		if errors.As(op.Err, &inner) {
			return 0
		}
	}
	var re *smithyhttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// code returns the S3 error code of err ("NoSuchKey", …), or "".
func code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

// translate turns S3's not-found of an object (NoSuchKey, or a bare 404 of
// a HEAD) into store.ErrNotFound. It is the one place s3store does so.
func translate(err error) error {
	if err == nil {
		return nil
	}
	var nsk *types.NoSuchKey
	var nf *types.NotFound
	if errors.As(err, &nsk) || errors.As(err, &nf) || code(err) == "NoSuchKey" ||
		(status(err) == http.StatusNotFound && code(err) != "NoSuchBucket") {
		return store.ErrNotFound
	}
	return err
}

func isPreconditionFailed(err error) bool {
	return status(err) == http.StatusPreconditionFailed || code(err) == "PreconditionFailed"
}

func isConflict(err error) bool {
	return status(err) == http.StatusConflict || code(err) == "ConditionalRequestConflict"
}

func isNotImplemented(err error) bool {
	return status(err) == http.StatusNotImplemented || code(err) == "NotImplemented"
}

func wrap(op string, hash bundle.Hash, err error) error {
	return fmt.Errorf("s3store: %s %s: %w", op, hash.Short(), err)
}

// check refuses a done context, a closed store and a malformed hash.
func (s *Store) check(ctx context.Context, op string, hash bundle.Hash) error {
	if err := ctx.Err(); err != nil {
		return wrap(op, hash, err)
	}
	if s.closed.Load() {
		return wrap(op, hash, store.ErrClosed)
	}
	if _, err := bundle.ParseHash(string(hash)); err != nil {
		return fmt.Errorf("s3store: %s: %w", op, err)
	}
	return nil
}

// ctxErr prefers ctx's error to the SDK's wrapping of it, so that callers
// see context.Canceled or DeadlineExceeded through errors.Is.
func ctxErr(ctx context.Context, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%v)", cerr, err)
	}
	return err
}

func stampString(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// updatedAt is UpdatedAt from an object's metadata, else its LastModified;
// coarse is true for LastModified, which S3 gives to the second.
func updatedAt(meta map[string]string, lastModified *time.Time) (t time.Time, coarse bool) {
	for k, v := range meta {
		if strings.EqualFold(k, metaUpdatedAt) {
			if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
				return t.UTC(), false
			}
		}
	}
	return aws.ToTime(lastModified).UTC(), true
}

// Put implements store.Store. It first refreshes the bundle's UpdatedAt
// (a metadata-only CopyObject onto itself); when that finds the bundle it
// returns created=false without reading blob. Otherwise it reads blob into a
// spool (memory up to Options.SpoolThreshold, else a temp file, removed
// before Put returns), computing its SHA-256, and sends one PutObject with
// "If-None-Match: *", the checksum and the length: the server stores the
// whole verified object or nothing. 412 PreconditionFailed means another
// save won: Put refreshes that bundle and returns created=false. 409
// ConditionalRequestConflict (a concurrent write in flight) is retried with
// backoff. A 501 NotImplemented for the conditional header switches this
// store to HEAD-then-PUT (see the package doc).
//
// After creating the bundle Put refreshes it once more, so that its
// UpdatedAt is after the end of the upload: a gc that started during a long
// upload does not sweep the new bundle (if it already did, the refresh
// finds nothing and Put uploads again from the spool).
func (s *Store) Put(ctx context.Context, hash bundle.Hash, blob io.Reader) (bool, error) {
	if err := s.check(ctx, "put", hash); err != nil {
		return false, err
	}
	key := s.Key(hash)
	var body *spool
	defer func() {
		if body != nil {
			body.Close()
		}
	}()
	created, conflicts := false, 0
	for range maxRounds {
		switch err := s.refresh(ctx, key); {
		case err == nil:
			return created, nil
		case !errors.Is(err, store.ErrNotFound):
			return false, wrap("put", hash, fmt.Errorf("refresh: %w", err))
		}
		if body == nil {
			var err error
			if body, err = newSpool(ctx, blob, s.spoolMax, s.tempDir); err != nil {
				return false, wrap("put", hash, err)
			}
		}
		err := s.putObject(ctx, key, body)
		switch {
		case err == nil:
			created = true // refresh in the next round
		case isPreconditionFailed(err):
			// Stored by another save meanwhile: refresh it in the next round.
		case isConflict(err) && conflicts < maxConflicts:
			conflicts++
			if err := sleep(ctx, time.Duration(conflicts)*50*time.Millisecond); err != nil {
				return false, wrap("put", hash, err)
			}
		default:
			return false, wrap("put", hash, ctxErr(ctx, err))
		}
	}
	return false, wrap("put", hash, errors.New("the bundle kept disappearing and reappearing; giving up"))
}

// putObject uploads body to key if no object is there.
func (s *Store) putObject(ctx context.Context, key string, body *spool) error {
	if err := body.Rewind(); err != nil {
		return err
	}
	in := &s3.PutObjectInput{
		Bucket:         aws.String(s.bucket),
		Key:            aws.String(key),
		Body:           body.Reader(),
		ContentLength:  aws.Int64(body.size),
		ChecksumSHA256: aws.String(body.sha256Base64()),
		ContentType:    aws.String("application/zstd"),
		Metadata:       map[string]string{metaUpdatedAt: stampString(s.now())},
	}
	if !s.noConditionalPut.Load() {
		in.IfNoneMatch = aws.String("*")
		_, err := s.client.PutObject(ctx, in, body.payloadHash())
		if err == nil || !isNotImplemented(err) {
			return err
		}
		// The server rejects conditional writes: HEAD-then-PUT from now on.
		s.noConditionalPut.Store(true)
		in.IfNoneMatch = nil
		if err := body.Rewind(); err != nil {
			return err
		}
	}
	if _, err := s.head(ctx, key); err == nil {
		return &smithy.GenericAPIError{Code: "PreconditionFailed", Message: "object exists (HEAD-then-PUT)"}
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	_, err := s.client.PutObject(ctx, in, body.payloadHash())
	return err
}

// refresh stamps the object at key with the current time, or returns
// store.ErrNotFound. The copy replaces metadata only: the bytes, checksum
// and ETag stay as they are, so a corrupt copy stays corrupt.
func (s *Store) refresh(ctx context.Context, key string) error {
	_, err := s.client.CopyObject(ctx, &s3.CopyObjectInput{
		Bucket:            aws.String(s.bucket),
		Key:               aws.String(key),
		CopySource:        aws.String(url.PathEscape(s.bucket) + "/" + escapeKey(key)),
		MetadataDirective: types.MetadataDirectiveReplace,
		ContentType:       aws.String("application/zstd"),
		Metadata:          map[string]string{metaUpdatedAt: stampString(s.now())},
	})
	return ctxErr(ctx, translate(err))
}

// escapeKey percent-encodes each segment of an object key for CopySource.
func escapeKey(key string) string {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// object is what a HEAD tells about a stored bundle.
type object struct {
	size      int64
	updatedAt time.Time
	coarse    bool
	etag      string
}

func (s *Store) head(ctx context.Context, key string) (object, error) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		return object{}, ctxErr(ctx, translate(err))
	}
	t, coarse := updatedAt(out.Metadata, out.LastModified)
	return object{size: aws.ToInt64(out.ContentLength), updatedAt: t, coarse: coarse, etag: aws.ToString(out.ETag)}, nil
}

// Open implements store.Store. It returns GetObject's body, streamed from
// the server; reading it fails once ctx is done.
func (s *Store) Open(ctx context.Context, hash bundle.Hash) (io.ReadCloser, error) {
	if err := s.check(ctx, "open", hash); err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(s.Key(hash))})
	if err != nil {
		return nil, wrap("open", hash, ctxErr(ctx, translate(err)))
	}
	return out.Body, nil
}

// Stat implements store.Store with a HeadObject.
func (s *Store) Stat(ctx context.Context, hash bundle.Hash) (store.Info, error) {
	if err := s.check(ctx, "stat", hash); err != nil {
		return store.Info{}, err
	}
	o, err := s.head(ctx, s.Key(hash))
	if err != nil {
		return store.Info{}, wrap("stat", hash, err)
	}
	return store.Info{Hash: hash, Size: o.size, UpdatedAt: o.updatedAt}, nil
}

// List implements store.Store. It pages through ListObjectsV2 under the
// prefix and yields only keys "<prefix>/<2 hex>/<64 hex>.case" whose shard
// is their hash's. ListObjectsV2 returns no user metadata, so List reads
// each bundle's UpdatedAt with a HeadObject, 16 at a time, just before
// yielding them (a bundle deleted in between is skipped).
func (s *Store) List(ctx context.Context) iter.Seq2[store.Info, error] {
	return func(yield func(store.Info, error) bool) {
		fail := func(err error) { yield(store.Info{}, fmt.Errorf("s3store: list: %w", ctxErr(ctx, err))) }
		if err := ctx.Err(); err != nil {
			fail(err)
			return
		}
		if s.closed.Load() {
			fail(store.ErrClosed)
			return
		}
		pages := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
			Bucket: aws.String(s.bucket),
			Prefix: aws.String(s.listPrefix()),
		}, func(o *s3.ListObjectsV2PaginatorOptions) { o.Limit = s.pageSize })
		for pages.HasMorePages() {
			page, err := pages.NextPage(ctx)
			if err != nil {
				fail(err)
				return
			}
			var batch []listed
			for _, obj := range page.Contents {
				key := aws.ToString(obj.Key)
				if hash, ok := s.hashOfKey(key); ok {
					batch = append(batch, listed{key: key, hash: hash})
				}
			}
			for len(batch) > 0 {
				n := min(len(batch), listBatch)
				if err := s.headAll(ctx, batch[:n]); err != nil {
					fail(err)
					return
				}
				for _, l := range batch[:n] {
					if l.gone {
						continue
					}
					if !yield(store.Info{Hash: l.hash, Size: l.obj.size, UpdatedAt: l.obj.updatedAt}, nil) {
						return
					}
				}
				batch = batch[n:]
			}
		}
	}
}

// listBatch is how many HEADs List sends at once.
const listBatch = 16

// listed is a bundle that List found, and what its HEAD said.
type listed struct {
	key  string
	hash bundle.Hash
	obj  object
	gone bool // deleted since it was listed
}

// headAll sends a HEAD for each of ls concurrently and returns the first
// error other than not-found.
func (s *Store) headAll(ctx context.Context, ls []listed) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	errs := make([]error, len(ls))
	var wg sync.WaitGroup
	for i := range ls {
		wg.Go(func() {
			o, err := s.head(ctx, ls[i].key)
			switch {
			case errors.Is(err, store.ErrNotFound):
				ls[i].gone = true
			case err != nil:
				errs[i] = err
			default:
				ls[i].obj = o
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Delete implements store.Store: a HeadObject (S3 deletes absent keys
// without complaint, so this tells deleted), then DeleteObject.
func (s *Store) Delete(ctx context.Context, hash bundle.Hash) (bool, error) {
	if err := s.check(ctx, "delete", hash); err != nil {
		return false, err
	}
	key := s.Key(hash)
	if _, err := s.head(ctx, key); errors.Is(err, store.ErrNotFound) {
		return false, nil
	} else if err != nil {
		return false, wrap("delete", hash, err)
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		return false, wrap("delete", hash, ctxErr(ctx, translate(err)))
	}
	return true, nil
}

// DeleteBefore implements store.Store: a HeadObject, then, when UpdatedAt is
// before cutoff, a DeleteObject with "If-Match: <ETag>", which some servers
// (AWS, the Versity gateway) honour and others ignore or reject with 501
// (then the delete is unconditional).
//
// The race this leaves: a re-save's refresh changes only metadata, and no
// precondition S3 offers on DeleteObject (ETag, size; last-modified time on
// some servers) sees a metadata change, so a re-save whose refresh lands
// between this HEAD and DELETE (a few milliseconds) returns created=false
// and is deleted anyway. The If-Match only keeps a different object at the
// key (deleted and saved again with other bytes) from being deleted. The
// next save of the bundle stores it again.
//
// An UpdatedAt taken from LastModified (objects written without the
// metadata) is known to the second only, so such a bundle is deleted only
// when the end of its second is not after cutoff.
func (s *Store) DeleteBefore(ctx context.Context, hash bundle.Hash, cutoff time.Time) (bool, error) {
	if err := s.check(ctx, "delete", hash); err != nil {
		return false, err
	}
	key := s.Key(hash)
	o, err := s.head(ctx, key)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, wrap("delete", hash, err)
	}
	latest := o.updatedAt
	if o.coarse {
		latest = latest.Truncate(time.Second).Add(time.Second)
		if latest.After(cutoff) {
			return false, nil
		}
	} else if !latest.Before(cutoff) {
		return false, nil
	}
	in := &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)}
	if o.etag != "" && !s.noConditionalDelete.Load() {
		in.IfMatch = aws.String(o.etag)
	}
	_, err = s.client.DeleteObject(ctx, in)
	if err != nil && in.IfMatch != nil && isNotImplemented(err) {
		s.noConditionalDelete.Store(true)
		in.IfMatch = nil
		_, err = s.client.DeleteObject(ctx, in)
	}
	switch {
	case err == nil:
		return true, nil
	case isPreconditionFailed(err):
		return false, nil // replaced meanwhile: not the object we checked
	default:
		return false, wrap("delete", hash, ctxErr(ctx, translate(err)))
	}
}

// Identity implements store.Store: "s3://bucket/prefix".
func (s *Store) Identity() string { return s.identity }

// Close implements store.Store. It closes idle connections; later calls
// return errors wrapping store.ErrClosed. Readers returned by Open before
// Close may still be read to the end.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.transport.CloseIdleConnections()
	return nil
}
