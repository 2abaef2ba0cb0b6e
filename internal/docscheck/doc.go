// Package docscheck holds tests that keep the documentation true of the
// repository: every link in its Markdown files resolves to a file (and a
// heading, for an anchor), docs/reason-codes.md lists every reason code of
// package messages with its exit status, the import rules of
// docs/architecture.md hold and its table of what each package imports is
// exact. It has no code besides its tests, and it
// imports only messages and the standard library.
package docscheck
