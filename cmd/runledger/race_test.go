//go:build race

package main

// raceBuild: the tests run with -race, so the binary they build is
// race-instrumented too.
const raceBuild = true
