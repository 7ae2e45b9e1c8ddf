// Package proctree keeps a worker's own server apart from the commands it
// runs, inside the worker's container.
//
// The server (meshworker, or mesh-exec in agent workers) and the commands it
// runs for a client share one uid, so by default those commands could trace
// the server, read its memory, or write into its output and the container's
// log through /proc. And a command can leave processes behind: a daemon
// started with setsid leaves its process group, so killing the group when
// the command returns misses it.
//
// Three pieces close that:
//   - Protect makes a process non-dumpable: a process of the same uid
//     without CAP_SYS_PTRACE can no longer ptrace it or open its /proc
//     files (mem, environ, fd).
//   - A Sweeper makes the server the subreaper of everything it starts, so
//     orphans stay its descendants, and when the last command it runs has
//     ended it kills every descendant left, setsid or not.
//   - Idle is the container's main process (PID 1): protected, it reaps
//     zombies and kills any process the kernel re-parents to it. In a worker
//     container nothing is a legitimate child of PID 1 (servers and helpers
//     come in through the engine's exec, from outside the container's PID
//     namespace), so such a process is an escapee of a server that died.
//     It looks every second while a server runs (a server announces itself
//     when it starts, Announce) and rarely while it is alone, so that an
//     idle worker costs its host no CPU.
//
// A cgroup or a PID namespace per command would also do, but both need
// privileges inside the container (a writable cgroup tree, or user
// namespaces that the seccomp profile refuses) that workers must not have.
package proctree

// IdleCommand is the subcommand that runs [Idle] as a worker container's
// main process, in meshworker and mesh-exec alike: [Announce] knows the
// container's init by it, and the marketplace starts workers with it.
const IdleCommand = "idle"
