// Package deploy holds the worker's Kubernetes manifests, alert rules and
// Grafana dashboard (the YAML and JSON files beside this one) and the test
// that checks them against the worker: strict decoding into the Kubernetes
// and Prometheus Operator API types, the env vars against worker.Config,
// the probes and the alert and dashboard queries against the metrics of a
// running worker. It is a module of its own so that the Kubernetes API
// types stay out of the main module's dependencies. It has no code of its
// own: nothing imports it.
package deploy
