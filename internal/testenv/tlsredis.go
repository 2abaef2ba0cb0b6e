package testenv

import (
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
	"testing"
	"time"

	"github.com/pyrula/caseworker/internal/testwait"
)

// TLSRedis is a redis-server of a test's own that speaks only TLS and
// asks every client for a certificate (mutual TLS), and the PEM files of
// the private certificate authority that signed its certificate and of a
// client certificate that authority signed.
type TLSRedis struct {
	// URL is the server's rediss:// URL.
	URL string
	// CAFile, CertFile and KeyFile are the authority's certificate and
	// the client's certificate and key.
	CAFile, CertFile, KeyFile string
}

// StartTLSRedis starts a TLSRedis for the test (redis-server from PATH,
// stopped at cleanup; skipped without one unless Required).
func StartTLSRedis(t testing.TB) TLSRedis {
	t.Helper()
	p := newPKI(t)
	return TLSRedis{URL: tlsRedis(t, p), CAFile: p.ca, CertFile: p.clientCert, KeyFile: p.clientKey}
}

// pki is a private certificate authority with a server and a client
// certificate, written as PEM files.
type pki struct {
	ca, serverCert, serverKey, clientCert, clientKey string
}

func newPKI(t testing.TB) pki {
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
func tlsRedis(t testing.TB, p pki) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if Required() {
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
