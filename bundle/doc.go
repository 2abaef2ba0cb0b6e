// Package bundle owns bundle format 1: its Go types, reading a bundle from
// zstd, gzip or plain JSON, validation, the canonical bytes and their SHA-256
// name (Hash), the zstd blob that stores and exports hold, verification of a
// stored blob, and the readable indented form that `case export --json` writes.
//
// The canonical JSON encoder itself lives in canonjson, the syntax of
// the volatile-field rules a registration records in bundle/volatile. bundle
// imports canonjson, bundle/volatile, runevent (a history's events), messages
// (reason codes) and nothing else of the project.
package bundle
