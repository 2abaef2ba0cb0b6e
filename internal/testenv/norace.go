//go:build !race

package testenv

// RaceEnabled reports whether the tests run under the race detector, so that
// binaries built for them use it too.
const RaceEnabled = false
