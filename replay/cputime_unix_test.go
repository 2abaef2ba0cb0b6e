//go:build unix

package replay_test

import (
	"syscall"
	"time"
)

// cpuTime is the CPU time (user + system) the process has used so far, all
// its threads (the garbage collector's too): on a shared machine it moves
// less with the load of other processes than the wall clock does.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
