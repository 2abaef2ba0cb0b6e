// Package version holds the version of this software: the pyrula_version of
// saved bundles, `worker version` and the build_info metric. Release builds
// set it with
//
//	go build -ldflags "-X github.com/pyrula/caseworker/version.Version=v1.2.3"
package version

// Version is the software's version; "dev" in builds that do not set it.
var Version = "0.1.0-dev"
