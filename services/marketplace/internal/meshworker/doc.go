// Package meshworker serves a worker's workspace as MCP tools: read, write,
// list, search, delete, exec and the git tools. It runs inside builtin worker
// containers (the meshworker binary), behind the marketplace's constraint gate.
//
// The gate decides; this package still enforces. Every file is opened through
// an [os.Root] on the workspace, so neither ".." nor a symbolic link can reach
// outside it even if the gate is bypassed or wrong; sizes are limited while
// streaming; commands run as argv, without a shell, in their own process
// group, and are killed with it. Git goes through go-git on a billy filesystem
// bound to the workspace, never through a git binary.
//
// os.Root still follows links that stay inside the workspace, so the
// worker's allowed and denied path globs (the definition's, passed as
// flags) are checked again here on the path a request resolves to, link by
// link: a link made by a command ("notes.md -> .env") cannot reach a denied
// file under an allowed name, and list, search and git_diff leave out what
// the globs refuse.
//
// An ordinary failure (no such file, too large, refused) is a tool result with
// isError set and a message saying what went wrong; protocol errors are left
// to the MCP SDK.
package meshworker
