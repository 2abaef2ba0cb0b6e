//go:build !race

package main_test

// raceEnabled builds the binary under test with the race detector too.
const raceEnabled = false
