package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/pyrula/caseworker/flow"
	"github.com/pyrula/caseworker/internal/tracing"
	"github.com/pyrula/caseworker/version"
	"github.com/pyrula/caseworker/worker"
)

// newLogger builds the zap logger PYRULA_LOG_LEVEL and PYRULA_LOG_FORMAT
// ask for, writing to stderr.
func newLogger(cfg worker.Config, stderr io.Writer) (*zap.Logger, error) {
	level, err := zapcore.ParseLevel(cfg.LogLevel)
	if err != nil {
		return nil, err
	}
	return zap.New(zapcore.NewCore(logEncoder(cfg.LogFormat), zapcore.AddSync(stderr), level)), nil
}

// logEncoder is the encoder of a PYRULA_LOG_FORMAT: console, else JSON.
func logEncoder(format string) zapcore.Encoder {
	ec := zap.NewProductionEncoderConfig()
	ec.EncodeTime = zapcore.ISO8601TimeEncoder
	if format == "console" {
		return zapcore.NewConsoleEncoder(ec)
	}
	return zapcore.NewJSONEncoder(ec)
}

// logError writes msg to stderr as one JSON log line at level error, in
// the form of serve's other log lines: a start-up failure of serve when
// PYRULA_LOG_FORMAT is json, so that a log pipeline reads it as it reads
// the rest.
func logError(stderr io.Writer, msg string) {
	log := zap.New(zapcore.NewCore(logEncoder("json"), zapcore.AddSync(stderr), zapcore.ErrorLevel))
	log.Error(msg)
	_ = log.Sync() // stderr may not sync
}

// traceFlushTimeout bounds the export of the spans still buffered at exit.
const traceFlushTimeout = 5 * time.Second

// serve runs the worker over reg's targets and its HTTP listener until ctx
// ends, then shuts down within PYRULA_SHUTDOWN_GRACE. getenv reads the
// configuration and the model clients' variables.
func serve(ctx context.Context, reg *flow.Registry, getenv func(string) string, stderr io.Writer) error {
	cfg, err := worker.LoadConfigFrom(getenv)
	if err != nil {
		return err
	}
	log, err := newLogger(cfg, stderr)
	if err != nil {
		return err
	}
	defer log.Sync() //nolint:errcheck // stderr may not sync
	prom := prometheus.NewRegistry()
	prom.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	params := worker.Params{Logger: log, Registerer: prom, Registry: reg, Getenv: getenv}
	traces, err := tracing.Start(ctx, getenv, version.Version)
	if err != nil {
		return err
	}
	if traces != nil {
		params.TracerProvider = traces.TracerProvider()
		log.Info("tracing on: spans exported over OTLP/HTTP")
		defer func() {
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), traceFlushTimeout)
			defer cancel()
			if err := traces.Shutdown(sctx); err != nil {
				log.Warn("flush the traces at exit", zap.Error(err))
			}
		}()
	}
	w, err := worker.New(cfg, params)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("PYRULA_HTTP_ADDR: listen on %s: %w", cfg.HTTPAddr, err)
	}
	srv := &http.Server{Handler: httpHandler(w, prom), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http listener", zap.Error(err))
		}
	}()
	targets := make([]string, 0)
	for _, t := range reg.Targets() {
		targets = append(targets, t.Name)
	}
	log.Info("listening", zap.String("addr", ln.Addr().String()), zap.String("targets", strings.Join(targets, ",")))
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

// httpHandler serves /healthz (the process is alive), /readyz (the worker
// is ready: Valkey and the store reachable, not shutting down) and
// /metrics (prom's metrics). It changes nothing.
func httpHandler(w *worker.Worker, prom *prometheus.Registry) http.Handler {
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
	return mux
}

// oneLine folds a multi-line message onto one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
