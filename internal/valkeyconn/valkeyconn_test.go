package valkeyconn_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	"github.com/pyrula/caseworker/internal/testwait"
	"github.com/pyrula/caseworker/internal/valkeyconn"
)

// pki is a private certificate authority with a server and a client
// certificate, written as PEM files.
type pki struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	write := func(name, kind string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey := key()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (cert, keyFile string) {
		k := key()
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &k.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			t.Fatal(err)
		}
		return write(name+".crt", "CERTIFICATE", der), write(name+".key", "EC PRIVATE KEY", kder)
	}
	p := pki{ca: write("ca.crt", "CERTIFICATE", caDER)}
	p.serverCert, p.serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

// tlsRedis starts a redis-server that speaks only TLS and asks every client
// for a certificate signed by p's authority, and returns its rediss:// URL.
func tlsRedis(t *testing.T, p pki) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("PYRULA_TEST_REQUIRE_SERVICES") == "1" {
			t.Fatal("redis-server is not on PATH (scripts/test installs it)")
		}
		t.Skip("redis-server is not on PATH; scripts/test installs it")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command(bin, "--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--tls-cert-file", p.serverCert, "--tls-key-file", p.serverKey, "--tls-ca-cert-file", p.ca,
		"--tls-auth-clients", "yes", "--save", "", "--appendonly", "no", "--dir", t.TempDir())
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testwait.Eventually(t, 10*time.Second, "the TLS redis-server listens", func() bool {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	return fmt.Sprintf("rediss://127.0.0.1:%d/0", port)
}

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
	p := newPKI(t)
	url := tlsRedis(t, p)

	opt, err := valkeyconn.Options(url, valkeyconn.TLSFiles{CAFile: p.ca, CertFile: p.clientCert, KeyFile: p.clientKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(opt); err != nil {
		t.Fatalf("with the CA and a client certificate: %v", err)
	}

	opt, err = valkeyconn.Options(url, valkeyconn.TLSFiles{CertFile: p.clientCert, KeyFile: p.clientKey})
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(opt); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v, want an untrusted certificate", err)
	}

	opt, err = valkeyconn.Options(url, valkeyconn.TLSFiles{CAFile: p.ca})
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(opt); err == nil {
		t.Error("without a client certificate the server answered")
	}
}

func TestOptionsRefusals(t *testing.T) {
	t.Parallel()
	p := newPKI(t)
	for _, tc := range []struct {
		name, url string
		files     valkeyconn.TLSFiles
		want      string
	}{
		{"not a URL", "http://x", valkeyconn.TLSFiles{}, "not a redis://, rediss:// or unix:// URL"},
		{"files without TLS", "redis://127.0.0.1:6379/0", valkeyconn.TLSFiles{CAFile: p.ca}, "apply to a rediss:// URL"},
		{"a certificate without its key", "rediss://127.0.0.1:6379/0", valkeyconn.TLSFiles{CertFile: p.clientCert}, "give both"},
		{"a missing CA file", "rediss://127.0.0.1:6379/0", valkeyconn.TLSFiles{CAFile: filepath.Join(t.TempDir(), "no.crt")}, "PYRULA_VALKEY_CA_FILE: open"},
		{"a CA file without a certificate", "rediss://127.0.0.1:6379/0", valkeyconn.TLSFiles{CAFile: p.clientKey}, "holds no PEM certificate"},
		{"a key that is not the certificate's", "rediss://127.0.0.1:6379/0", valkeyconn.TLSFiles{CertFile: p.clientCert, KeyFile: p.serverKey}, "PYRULA_VALKEY_CERT_FILE, PYRULA_VALKEY_KEY_FILE"},
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
