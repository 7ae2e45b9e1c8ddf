// Command mesh-exec-hook is the agent CLI's hook command in agent workers:
// it hands each hook event to mesh-exec serve, which checks the agent's
// tool call against the worker's constraints, and prints the answer. Any
// failure exits with status 2, which blocks the tool call. It is small on
// purpose: it starts once per tool call (package hookwire).
package main

import (
	"os"

	"github.com/meshwork/meshwork/services/mesh-exec/internal/hookwire"
)

func main() { os.Exit(hookwire.Run(os.Stdin, os.Stdout, os.Stderr, os.Getenv)) }
