package s3store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"

	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go/middleware"

	"github.com/pyrula/caseworker/store"
)

// spool holds a blob between reading it from the caller and uploading it.
//
// Why spool at all: a PutObject that carries the body's SHA-256 checksum
// (and, over plain HTTP, a SigV4 signature of the payload) needs that hash
// before the first byte is sent, and retries (409, a gc sweeping the new
// bundle) need to send the body again; the caller's blob is a one-shot
// reader. Streaming the blob without a length would need aws-chunked
// trailing checksums, which the SDK uses only over TLS, or a multipart
// upload, whose checksum is a checksum of part checksums rather than of the
// body and whose conditional completion not every S3-compatible server
// supports. So blobs up to the spool threshold (8 MiB by default) are held
// in memory and larger ones go to a temp file, read once while hashing: the
// memory a Put holds is bounded by the threshold, not by the bundle (up to
// 512 MiB). Reading the blob fully before the upload also means a blob that
// fails to read stores nothing and costs no request.
type spool struct {
	size   int64
	sum    []byte
	mem    *bytes.Reader // the blob, when small
	file   *os.File      // the blob, when large
	closed bool
}

// newSpool reads blob to its end, stopping with ctx's error once ctx is done.
func newSpool(ctx context.Context, blob io.Reader, threshold int64, dir string) (*spool, error) {
	r := store.ContextReader(ctx, blob)
	h := sha256.New()
	var buf bytes.Buffer
	n, err := io.Copy(io.MultiWriter(&buf, h), io.LimitReader(r, threshold+1))
	if err != nil {
		return nil, fmt.Errorf("read blob: %w", err)
	}
	if n <= threshold {
		return &spool{size: n, sum: h.Sum(nil), mem: bytes.NewReader(buf.Bytes())}, nil
	}
	f, err := os.CreateTemp(dir, "pyrula-s3-spool-*")
	if err != nil {
		return nil, fmt.Errorf("spool blob: %w", err)
	}
	// Unlinked at once where the system allows, so nothing is left behind
	// if the process dies; elsewhere Close removes it.
	_ = os.Remove(f.Name())
	size, err := spoolRest(f, h, buf.Bytes(), r)
	if err != nil {
		f.Close()
		_ = os.Remove(f.Name())
		return nil, err
	}
	return &spool{size: size, sum: h.Sum(nil), file: f}, nil
}

// spoolRest writes head and then the rest of r to f, hashing the rest too.
func spoolRest(f *os.File, h hash.Hash, head []byte, r io.Reader) (int64, error) {
	if _, err := f.Write(head); err != nil {
		return 0, fmt.Errorf("spool blob: %w", err)
	}
	n, err := io.Copy(io.MultiWriter(f, h), r)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			return 0, fmt.Errorf("spool blob: %w", err)
		}
		return 0, fmt.Errorf("read blob: %w", err)
	}
	return int64(len(head)) + n, nil
}

// Rewind moves back to the start of the blob, before each upload.
func (sp *spool) Rewind() error {
	if sp.mem != nil {
		_, err := sp.mem.Seek(0, io.SeekStart)
		return err
	}
	_, err := sp.file.Seek(0, io.SeekStart)
	return err
}

// Reader returns the blob, seekable, so that the SDK can rewind it on a retry.
func (sp *spool) Reader() io.ReadSeeker {
	if sp.mem != nil {
		return sp.mem
	}
	// Hide *os.File's other methods (WriteTo, ReadFrom) from the SDK.
	return struct{ io.ReadSeeker }{sp.file}
}

func (sp *spool) sha256Base64() string { return base64.StdEncoding.EncodeToString(sp.sum) }

// payloadHash gives SigV4 the SHA-256 already computed, so that the SDK does
// not read the body once more to compute it for a plain-HTTP endpoint.
func (sp *spool) payloadHash() func(*s3.Options) {
	hexSum := hex.EncodeToString(sp.sum)
	return func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			if _, ok := st.Finalize.Get("ComputePayloadHash"); !ok {
				return nil // a newer SDK: let it compute the hash itself
			}
			return st.Finalize.Insert(middleware.FinalizeMiddlewareFunc("PyrulaPayloadHash",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
					middleware.FinalizeOutput, middleware.Metadata, error,
				) {
					return next.HandleFinalize(v4.SetPayloadHash(ctx, hexSum), in)
				}), "ComputePayloadHash", middleware.Before)
		})
	}
}

// Close releases the spool (and removes its temp file where it could not be
// unlinked while open).
func (sp *spool) Close() {
	if sp.closed {
		return
	}
	sp.closed = true
	if sp.file != nil {
		name := sp.file.Name()
		sp.file.Close()
		_ = os.Remove(name) // already gone where unlinking an open file works
	}
}
