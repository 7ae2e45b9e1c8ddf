// Command probe is what the runtimetest suite runs inside workers to observe
// them from the inside. It is built static (CGO_ENABLED=0), so it runs in a
// FROM scratch image.
//
//	probe echo            copy stdin to stdout
//	probe noisy-echo      copy stdin to stdout, writing to stderr around every chunk
//	probe write PATH      write stdin to PATH (creating its directories)
//	probe read PATH       print PATH's content
//	probe stderr TEXT     write TEXT and a newline to stderr
//	probe exit N          exit with status N
//	probe whoami          print "uid:gid cwd"
//	probe sleep           sleep until killed, ignoring stdin
//	probe orphan HOLD     announce itself to PID 1 as a server does
//	                      (proctree.Announce; it fails unless PID 1 took the
//	                      signal), start "probe sleep" in a session of its
//	                      own, print its pid, wait HOLD seconds and exit: the
//	                      sleep is then re-parented to PID 1
//	probe alive PID       print "alive" while PID exists (a zombie too), else "gone"
//	probe net ADDR        print the network interfaces, then try a TCP dial to ADDR
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/meshwork/meshwork/pkg/proctree"
)

func main() {
	if len(os.Args) < 2 {
		fail("usage: probe echo|noisy-echo|write|read|stderr|exit|whoami|sleep|orphan|alive|net ...")
	}
	switch cmd, args := os.Args[1], os.Args[2:]; cmd {
	case "echo":
		if _, err := io.Copy(os.Stdout, os.Stdin); err != nil {
			fail(err.Error())
		}
	case "noisy-echo":
		buf := make([]byte, 4096)
		for {
			fmt.Fprintln(os.Stderr, "noise: stderr must never reach stdout")
			n, err := os.Stdin.Read(buf)
			if n > 0 {
				if _, werr := os.Stdout.Write(buf[:n]); werr != nil {
					fail(werr.Error())
				}
			}
			if err == io.EOF {
				return
			}
			if err != nil {
				fail(err.Error())
			}
		}
	case "write":
		need(args, 1)
		data, err := io.ReadAll(os.Stdin)
		if err != nil {
			fail(err.Error())
		}
		if err := os.MkdirAll(filepath.Dir(args[0]), 0o755); err != nil {
			fail(err.Error())
		}
		if err := os.WriteFile(args[0], data, 0o644); err != nil {
			fail(err.Error())
		}
	case "read":
		need(args, 1)
		data, err := os.ReadFile(args[0])
		if err != nil {
			fail(err.Error())
		}
		_, _ = os.Stdout.Write(data)
	case "stderr":
		need(args, 1)
		fmt.Fprintln(os.Stderr, strings.Join(args, " "))
	case "exit":
		need(args, 1)
		n, err := strconv.Atoi(args[0])
		if err != nil {
			fail(err.Error())
		}
		os.Exit(n)
	case "whoami":
		wd, err := os.Getwd()
		if err != nil {
			fail(err.Error())
		}
		fmt.Printf("%d:%d %s\n", os.Getuid(), os.Getgid(), wd)
	case "sleep":
		fmt.Println("sleeping")
		for {
			time.Sleep(time.Hour)
		}
	case "orphan":
		need(args, 1)
		hold, err := strconv.Atoi(args[0])
		if err != nil {
			fail(err.Error())
		}
		if ok, err := proctree.Announce(); err != nil || !ok {
			fail(fmt.Sprintf("announce: signalled %t, %v", ok, err))
		}
		self, err := os.Executable()
		if err != nil {
			fail(err.Error())
		}
		// No stdout: the exec's stream ends when this probe does.
		child := exec.Command(self, "sleep")
		child.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := child.Start(); err != nil {
			fail(err.Error())
		}
		fmt.Println(child.Process.Pid)
		time.Sleep(time.Duration(hold) * time.Second)
	case "alive":
		need(args, 1)
		pid, err := strconv.Atoi(args[0])
		if err != nil {
			fail(err.Error())
		}
		switch err := syscall.Kill(pid, 0); {
		case err == nil:
			fmt.Println("alive")
		case errors.Is(err, syscall.ESRCH):
			fmt.Println("gone")
		default:
			fail(err.Error())
		}
	case "net":
		need(args, 1)
		ifaces, err := net.Interfaces()
		if err != nil {
			fail(err.Error())
		}
		var names []string
		for _, i := range ifaces {
			names = append(names, i.Name)
		}
		fmt.Println("interfaces:", strings.Join(names, ","))
		c, err := net.DialTimeout("tcp", args[0], 3*time.Second)
		if err != nil {
			fmt.Println("dial: error:", err)
			return
		}
		_ = c.Close()
		fmt.Println("dial: connected")
	default:
		fail("unknown command " + cmd)
	}
}

func need(args []string, n int) {
	if len(args) < n {
		fail(fmt.Sprintf("%s needs %d argument(s)", os.Args[1], n))
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, "probe:", msg)
	os.Exit(1)
}
