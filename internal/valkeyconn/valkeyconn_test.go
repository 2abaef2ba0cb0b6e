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

	opt, err := valkeyconn.Options(url, valkeyconn.Settings{CAFile: srv.CAFile, CertFile: srv.CertFile, KeyFile: srv.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(opt); err != nil {
		t.Fatalf("with the CA and a client certificate: %v", err)
	}

	opt, err = valkeyconn.Options(url, valkeyconn.Settings{CertFile: srv.CertFile, KeyFile: srv.KeyFile})
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(opt); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v, want an untrusted certificate", err)
	}

	opt, err = valkeyconn.Options(url, valkeyconn.Settings{CAFile: srv.CAFile})
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
		files     valkeyconn.Settings
		want      string
	}{
		{"not a URL", "http://x", valkeyconn.Settings{}, "not a redis://, rediss:// or unix:// URL"},
		{"files without TLS", "redis://127.0.0.1:6379/0", valkeyconn.Settings{CAFile: srv.CAFile}, "apply to a rediss:// URL"},
		{"a certificate without its key", "rediss://127.0.0.1:6379/0", valkeyconn.Settings{CertFile: srv.CertFile}, "give both"},
		{"a missing CA file", "rediss://127.0.0.1:6379/0", valkeyconn.Settings{CAFile: filepath.Join(t.TempDir(), "no.crt")}, "PYRULA_VALKEY_CA_FILE: open"},
		{"a CA file without a certificate", "rediss://127.0.0.1:6379/0", valkeyconn.Settings{CAFile: srv.KeyFile}, "holds no PEM certificate"},
		{"a key that is not the certificate's", "rediss://127.0.0.1:6379/0", valkeyconn.Settings{CertFile: srv.CertFile, KeyFile: key}, "PYRULA_VALKEY_CERT_FILE, PYRULA_VALKEY_KEY_FILE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := valkeyconn.Options(tc.url, tc.files)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
	if opt, err := valkeyconn.Options("redis://:secret@127.0.0.1:6379/0", valkeyconn.Settings{}); err != nil || !opt.DisableCache {
		t.Errorf("a plain URL: %+v, %v", opt, err)
	}
}

// The ACL user and password given apart from the URL log in as that user:
// the server answers with them and refuses a wrong password; credentials
// in both places, or a user without a password, are refused before any
// connection, naming the variables and no secret.
func TestCredentialsApartFromTheURL(t *testing.T) {
	t.Parallel()
	url := testenv.ValkeyURL(t)
	admin := testenv.ValkeyClient(t)
	ctx := context.Background()
	user := testenv.UniqueName(t, "valkeyconn-user")
	const password = "s3cret-apart"
	if err := admin.Do(ctx, admin.B().AclSetuser().Username(user).Rule("reset", "on", ">"+password, "+ping").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Do(context.Background(), admin.B().AclDeluser().Username(user).Build()) })

	opt, err := valkeyconn.Options(url, valkeyconn.Settings{Username: user, Password: password})
	if err != nil {
		t.Fatal(err)
	}
	if opt.Username != user || opt.Password != password {
		t.Fatalf("options carry user %q, want %q", opt.Username, user)
	}
	if err := ping(opt); err != nil {
		t.Fatalf("as the ACL user: %v", err)
	}
	opt, err = valkeyconn.Options(url, valkeyconn.Settings{Username: user, Password: "wrong"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(opt); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
		t.Errorf("a wrong password: %v, want WRONGPASS", err)
	}

	for _, tc := range []struct {
		name, url string
		s         valkeyconn.Settings
		want      string
	}{
		{"credentials in both places", "redis://u:" + password + "@127.0.0.1:6379/0", valkeyconn.Settings{Password: password}, "give the credentials in one place"},
		{"a user without a password", "redis://127.0.0.1:6379/0", valkeyconn.Settings{Username: user}, "PYRULA_VALKEY_USERNAME is set without PYRULA_VALKEY_PASSWORD"},
	} {
		_, err := valkeyconn.Options(tc.url, tc.s)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), password) {
			t.Errorf("%s: err = %v, want one containing %q and no password", tc.name, err, tc.want)
		}
	}
}
