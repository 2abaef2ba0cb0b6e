// Package valkeyconn is the one way the worker and the CLI turn their Valkey
// settings into a client's options: the URL (PYRULA_VALKEY_URL: redis://,
// rediss:// or unix://); the ACL user and password, either in the URL or
// apart from it (PYRULA_VALKEY_USERNAME, PYRULA_VALKEY_PASSWORD, so that the
// URL holds no secret and can sit in plain configuration); and, for
// rediss://, the files of a private certificate authority and of a client
// certificate (mutual TLS), given as paths so that Kubernetes can mount them
// from a Secret. Client-side caching is off: the keys change under other
// processes.
//
// valkeyconn imports only valkey-go and the standard library.
package valkeyconn

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/valkey-io/valkey-go"
)

// The environment variables of the settings besides the URL.
const (
	// EnvUsername and EnvPassword are the ACL user and password, for a URL
	// that carries none.
	EnvUsername = "PYRULA_VALKEY_USERNAME"
	EnvPassword = "PYRULA_VALKEY_PASSWORD"
	// EnvCAFile names a PEM file of certificate authorities that sign the
	// server's certificate, trusted besides the system's.
	EnvCAFile = "PYRULA_VALKEY_CA_FILE"
	// EnvCertFile and EnvKeyFile name the PEM files of the client's
	// certificate and private key, sent when the server asks for one
	// (mutual TLS). Both or neither.
	EnvCertFile = "PYRULA_VALKEY_CERT_FILE"
	EnvKeyFile  = "PYRULA_VALKEY_KEY_FILE"
)

// ErrInvalidURL means the URL is not one valkey-go reads.
var ErrInvalidURL = errors.New("not a redis://, rediss:// or unix:// URL")

// Settings are the connection's settings besides the URL; empty ones are
// not used.
type Settings struct {
	// Username and Password log in as an ACL user (the password alone: as
	// the default user), for a URL without credentials.
	Username, Password string
	// CAFile, CertFile and KeyFile are the paths of the TLS files.
	CAFile, CertFile, KeyFile string
}

// FromEnv reads the settings from getenv.
func FromEnv(getenv func(string) string) Settings {
	return Settings{
		Username: getenv(EnvUsername), Password: getenv(EnvPassword),
		CAFile: getenv(EnvCAFile), CertFile: getenv(EnvCertFile), KeyFile: getenv(EnvKeyFile),
	}
}

// tlsFiles says whether any TLS file is given.
func (s Settings) tlsFiles() bool { return s.CAFile != "" || s.CertFile != "" || s.KeyFile != "" }

// Options returns the client options of url with the settings applied.
// Errors say which setting is wrong and never print the URL or a password:
// an invalid URL (wrapping ErrInvalidURL), credentials both in the URL and
// apart, files given for a URL that is not rediss://, a certificate without
// its key (or the other way round), a file that cannot be read or holds no
// certificate.
func Options(url string, s Settings) (valkey.ClientOption, error) {
	opt, err := valkey.ParseURL(url)
	if err != nil {
		return opt, ErrInvalidURL
	}
	opt.DisableCache = true
	// No CLIENT SETINFO at connect: the worker's ACL line (docs/operate.md)
	// then needs no CLIENT subcommand that not every server has.
	opt.ClientSetInfo = valkey.DisableClientSetInfo
	if s.Username != "" || s.Password != "" {
		if opt.Username != "" || opt.Password != "" {
			return opt, fmt.Errorf("the Valkey URL carries a user or password and %s or %s is set: give the credentials in one place", EnvUsername, EnvPassword)
		}
		if s.Username != "" && s.Password == "" {
			return opt, fmt.Errorf("%s is set without %s", EnvUsername, EnvPassword)
		}
		opt.Username, opt.Password = s.Username, s.Password
	}
	if !s.tlsFiles() {
		return opt, nil
	}
	files := s
	if !strings.HasPrefix(url, "rediss://") {
		return opt, fmt.Errorf("%s, %s and %s apply to a rediss:// URL (TLS), and the Valkey URL is not one", EnvCAFile, EnvCertFile, EnvKeyFile)
	}
	if (files.CertFile == "") != (files.KeyFile == "") {
		return opt, fmt.Errorf("%s and %s go together: give both (a client certificate and its key) or neither", EnvCertFile, EnvKeyFile)
	}
	cfg := opt.TLSConfig
	if cfg == nil {
		cfg = &tls.Config{}
	} else {
		cfg = cfg.Clone()
	}
	if cfg.MinVersion == 0 {
		cfg.MinVersion = tls.VersionTLS12
	}
	if files.CAFile != "" {
		pem, err := os.ReadFile(files.CAFile)
		if err != nil {
			return opt, fmt.Errorf("%s: %w", EnvCAFile, err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return opt, fmt.Errorf("%s: %s holds no PEM certificate", EnvCAFile, files.CAFile)
		}
		cfg.RootCAs = pool
	}
	if files.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(files.CertFile, files.KeyFile)
		if err != nil {
			return opt, fmt.Errorf("%s, %s: %w", EnvCertFile, EnvKeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	opt.TLSConfig = cfg
	return opt, nil
}
