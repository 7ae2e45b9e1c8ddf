package main

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/meshwork/meshwork/pkg/fakeclaudelog"
)

// stdinPeeked holds what checking stdin for the invocation log read from a
// pipe; the prompt reader puts it back in front.
var stdinPeeked []byte

// logInvocation appends this invocation to $FAKE_CLAUDE_LOG, when set.
func logInvocation() {
	path := os.Getenv(fakeclaudelog.Env)
	if path == "" {
		return
	}
	cwd, _ := os.Getwd()
	_, hasCC := os.LookupEnv("CLAUDECODE")
	_, hasEntry := os.LookupEnv("CLAUDE_CODE_ENTRYPOINT")
	devNull, peeked := stdinIsDevNull()
	stdinPeeked = peeked
	err := fakeclaudelog.Append(path, fakeclaudelog.Invocation{
		Argv: os.Args, Cwd: cwd, EnvHasClaudeCode: hasCC, EnvHasCodeEntrypoint: hasEntry,
		StdinIsDevNull: devNull, UID: os.Getuid(), PID: os.Getpid(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake claude: FAKE_CLAUDE_LOG:", err)
	}
}

// stdinIsDevNull reports whether stdin is /dev/null, or is empty and closed
// (an empty file, a pipe whose writer is gone, no stdin at all). A pipe is
// read without blocking; whatever that read returns is handed back so the
// prompt reader does not lose it.
func stdinIsDevNull() (bool, []byte) {
	var st syscall.Stat_t
	if err := syscall.Fstat(0, &st); err != nil {
		return errors.Is(err, syscall.EBADF), nil
	}
	switch st.Mode & syscall.S_IFMT {
	case syscall.S_IFCHR:
		var null syscall.Stat_t
		return syscall.Stat(os.DevNull, &null) == nil && st.Rdev == null.Rdev, nil
	case syscall.S_IFREG:
		return st.Size == 0, nil
	case syscall.S_IFIFO, syscall.S_IFSOCK:
		if err := syscall.SetNonblock(0, true); err != nil {
			return false, nil
		}
		defer func() { _ = syscall.SetNonblock(0, false) }()
		buf := make([]byte, 4096)
		n, err := syscall.Read(0, buf)
		if n > 0 {
			return false, buf[:n]
		}
		return n == 0 && err == nil, nil
	}
	return false, nil
}
