package valkeyconn_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testenv"
	"github.com/pyrula/caseworker/internal/valkeyconn"
)

// ping connects with opt and sends PING.
func ping(opt valkey.ClientOption) error {
	opt.Dialer.Timeout = 3 * time.Second
	c, err := valkey.NewClient(opt)
	if err != nil {
		return err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return c.Do(ctx, c.B().Ping().Build()).Error()
}

// A private CA and a client certificate reach a server that asks for one;
// without the CA the server is not trusted, without the certificate the
// server refuses the client.
func TestMutualTLS(t *testing.T) {
	t.Parallel()
	srv := testenv.StartTLSRedis(t)
	url := srv.URL

	opt, err := valkeyconn.Options(url, valkeyconn.TLSFiles{CAFile: srv.CAFile, CertFile: srv.CertFile, KeyFile: srv.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(opt); err != nil {
		t.Fatalf("with the CA and a client certificate: %v", err)
	}

	opt, err = valkeyconn.Options(url, valkeyconn.TLSFiles{CertFile: srv.CertFile, KeyFile: srv.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(opt); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v, want an untrusted certificate", err)
	}

	opt, err = valkeyconn.Options(url, valkeyconn.TLSFiles{CAFile: srv.CAFile})
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(opt); err == nil {
		t.Error("without a client certificate the server answered")
	}
}

func TestOptionsRefusals(t *testing.T) {
	t.Parallel()
	srv := testenv.StartTLSRedis(t)
	key := filepath.Join(filepath.Dir(srv.KeyFile), "server.key")
	for _, tc := range []struct {
		name, url string
		files     valkeyconn.TLSFiles
		want      string
	}{
		{"not a URL", "http://x", valkeyconn.TLSFiles{}, "not a redis://, rediss:// or unix:// URL"},
		{"files without TLS", "redis://127.0.0.1:6379/0", valkeyconn.TLSFiles{CAFile: srv.CAFile}, "apply to a rediss:// URL"},
		{"a certificate without its key", "rediss://127.0.0.1:6379/0", valkeyconn.TLSFiles{CertFile: srv.CertFile}, "give both"},
		{"a missing CA file", "rediss://127.0.0.1:6379/0", valkeyconn.TLSFiles{CAFile: filepath.Join(t.TempDir(), "no.crt")}, "PYRULA_VALKEY_CA_FILE: open"},
		{"a CA file without a certificate", "rediss://127.0.0.1:6379/0", valkeyconn.TLSFiles{CAFile: srv.KeyFile}, "holds no PEM certificate"},
		{"a key that is not the certificate's", "rediss://127.0.0.1:6379/0", valkeyconn.TLSFiles{CertFile: srv.CertFile, KeyFile: key}, "PYRULA_VALKEY_CERT_FILE, PYRULA_VALKEY_KEY_FILE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := valkeyconn.Options(tc.url, tc.files)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
	if opt, err := valkeyconn.Options("redis://:secret@127.0.0.1:6379/0", valkeyconn.TLSFiles{}); err != nil || !opt.DisableCache {
		t.Errorf("a plain URL: %+v, %v", opt, err)
	}
}
