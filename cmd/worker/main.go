// Command worker is the case worker daemon: `worker serve` (the default)
// consumes the message stream (package worker), `worker demo` runs the whole
// flow on an embedded in-memory server (demo.go), `worker db migrate` applies
// the archive's migrations, `worker version` prints the version and
// `worker --help` lists every PYRULA_ variable with its default. It is thin:
// main builds a signal context and calls run.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/flow/examples"
	"github.com/pyrula/caseworker/internal/version"
	"github.com/pyrula/caseworker/journal/pgarchive"
	"github.com/pyrula/caseworker/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "error: %v\n", err)
		os.Exit(1)
	}
}

// run runs the command args name; ctx ends on SIGINT or SIGTERM.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "serve"
	if len(args) > 0 {
		cmd = args[0]
	}
	switch cmd {
	case "-h", "--help", "help":
		return usage(stdout)
	case "version":
		_, err := fmt.Fprintln(stdout, version.Version)
		return err
	case "db":
		if len(args) != 2 || args[1] != "migrate" {
			return errors.New("usage: worker db migrate")
		}
		return migrate(ctx, stdout)
	case "demo":
		return demo(ctx, args[1:], stdout, stderr)
	case "serve":
		if len(args) > 1 {
			return errors.New("usage: worker [serve]")
		}
		return serve(ctx, stderr)
	default:
		return fmt.Errorf("unknown command %q (see worker --help)", cmd)
	}
}

func usage(w io.Writer) error {
	fmt.Fprint(w, `Usage: worker [serve | demo [--store DIR] | db migrate | version | --help]

  serve       consume the message stream (the default)
  demo        the whole flow on an embedded in-memory server: no Valkey needed
  db migrate  apply the archive schema's migrations to PYRULA_POSTGRES_DSN
  version     print the version

Environment:
`)
	return worker.Usage(w)
}

func migrate(ctx context.Context, stdout io.Writer) error {
	dsn := os.Getenv("PYRULA_POSTGRES_DSN")
	if dsn == "" {
		return errors.New("db migrate: PYRULA_POSTGRES_DSN is not set")
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return fmt.Errorf("db migrate: %w", err)
	}
	defer pool.Close()
	applied, err := pgarchive.Migrate(ctx, pool)
	if err != nil {
		return fmt.Errorf("db migrate: %w", err)
	}
	_, err = fmt.Fprintf(stdout, "applied %d migrations %v\n", len(applied), applied)
	return err
}

func newLogger(cfg worker.Config, stderr io.Writer) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(cfg.LogLevel)
	if err != nil {
		return nil, err
	}
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder = zapcore.NewJSONEncoder(ec)
	if cfg.LogFormat == "console" {
		enc = zapcore.NewConsoleEncoder(ec)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(stderr), level)), nil
}

// serve runs the worker and its HTTP listener until ctx ends, then shuts
// down within PYRULA_SHUTDOWN_GRACE.
func serve(ctx context.Context, stderr io.Writer) error {
	cfg, err := worker.LoadConfig()
	if err != nil {
		return err
	}
	log, err := newLogger(cfg, stderr)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // stderr may not sync
	reg := flow.NewRegistry()
	if _, err := examples.Register(reg); err != nil {
		return fmt.Errorf("register the example targets: %w", err)
	}
	prom := prometheus.NewRegistry()
	prom.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	w, err := worker.New(cfg, worker.Params{Logger: log, Registerer: prom, Registry: reg})
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(rw http.ResponseWriter, _ *http.Request) { fmt.Fprintln(rw, "ok") })
	mux.HandleFunc("/readyz", func(rw http.ResponseWriter, _ *http.Request) {
		if !w.Ready() {
			http.Error(rw, "not ready", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(rw, "ready")
	})
	mux.Handle("/metrics", promhttp.HandlerFor(prom, promhttp.HandlerOpts{}))
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("PYRULA_HTTP_ADDR: listen on %s: %w", cfg.HTTPAddr, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http listener", zap.Error(err))
		}
	}()
	log.Info("listening", zap.String("addr", ln.Addr().String()))
	if err := w.Start(ctx); err != nil {
		srv.Close()
		return err
	}
	<-ctx.Done()
	log.Info("shutting down", zap.Duration("grace", cfg.ShutdownGrace))
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.ShutdownGrace)
	defer cancel()
	werr := w.Stop(sctx)
	herr := srv.Shutdown(sctx)
	if werr != nil {
		// In-flight messages were cut off; they stay pending and are
		// redelivered, so the exit is still clean.
		log.Warn("shutdown grace ended with messages in flight", zap.Error(werr))
	}
	if herr != nil {
		log.Warn("http shutdown", zap.Error(herr))
	}
	log.Info("stopped")
	return nil
}
