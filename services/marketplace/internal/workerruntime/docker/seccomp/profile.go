// Package seccomp holds the system call filter every Meshwork worker
// container runs under: Docker's default profile minus the calls workers
// never need and that are among the kernel's largest attack surfaces.
//
// The profile is a file in the repository (worker.json), so an operator can
// read and audit exactly what workers may call; TestProfileIsGenerated checks
// that it is Docker's current default with Refused taken out, and rewrites it
// with -update when the upstream profile changes.
package seccomp

import (
	_ "embed"
)

// Refused are the system calls the engine's default profile allows (some
// only on recent kernels or with a capability) that workers are refused:
//   - io_uring_*: an asynchronous interface to most of the kernel that
//     bypasses per-call filtering; engines before Docker 25 allow it;
//   - ptrace, process_vm_readv, process_vm_writev: reading or changing
//     another process, such as the worker's own server;
//   - perf_event_open, userfaultfd: kernel surfaces build and test tools do
//     not use and exploits often do.
var Refused = []string{
	"io_uring_enter", "io_uring_register", "io_uring_setup",
	"perf_event_open",
	"process_vm_readv", "process_vm_writev",
	"ptrace",
	"userfaultfd",
}

// Profile is the worker profile as Docker's "seccomp=<json>" security
// option takes it.
//
//go:embed worker.json
var Profile string
