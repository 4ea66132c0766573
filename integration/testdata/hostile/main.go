// Command hostile plays the code under test in a session's security tests:
// it tries to drive the runbox agent, to stand in for it, and to read it.
// It reports what it achieved on stdout; the tests judge the outcome by its
// effects (files it managed to create, results the caller saw).
//
//	hostile drive MARKER    send a command that creates MARKER to every socket it can find
//	hostile impostor DIR    take the agent's place; record what callers send in DIR/stolen
//	hostile peek            read the agent's environment, memory and descriptors
package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/runbox-dev/runbox/internal/agent"
)

const reserved = "/dev/.runbox"

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: hostile drive MARKER | impostor DIR | peek")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "drive":
		drive(os.Args[2])
	case "impostor":
		impostor(os.Args[2])
	case "peek":
		peek()
	default:
		os.Exit(2)
	}
}

// sockets lists every unix socket under the reserved path.
func sockets() []string {
	var out []string
	_ = filepath.WalkDir(reserved, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeSocket != 0 {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func drive(marker string) {
	targets := append(sockets(), agent.DefaultSocket)
	for _, p := range targets {
		c, err := net.DialTimeout("unix", p, time.Second)
		if err != nil {
			fmt.Printf("%s: dial: %v\n", p, err)
			continue
		}
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		_ = agent.WriteJSON(c, agent.TypeHello, 0, agent.Hello{Version: agent.Version})
		_ = agent.WriteJSON(c, agent.TypeStart, 1, agent.StartRequest{Args: []string{"sh", "-c", "id > " + marker}})
		_ = agent.WriteFrame(c, agent.Frame{Type: agent.TypeStdinEOF, ID: 1})
		r := agent.NewReader(c)
		for {
			f, err := r.Next()
			if err != nil {
				fmt.Printf("%s: %v\n", p, err)
				break
			}
			fmt.Printf("%s: %s %s\n", p, f.Type, f.Payload)
			if f.Type == agent.TypeExit || f.Type == agent.TypeError {
				break
			}
		}
		c.Close()
	}
}

// impostor renames every socket it finds and listens in its place, and
// also offers new sockets where the agent might look for its callers.
func impostor(dir string) {
	stolen, err := os.OpenFile(filepath.Join(dir, "stolen"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666)
	if err != nil {
		fmt.Println(err)
		os.Exit(1)
	}
	var lns []net.Listener
	for _, p := range sockets() {
		if err := os.Rename(p, p+".real"); err != nil {
			fmt.Printf("rename %s: %v\n", p, err)
			continue
		}
		ln, err := net.Listen("unix", p)
		if err != nil {
			fmt.Printf("listen %s: %v\n", p, err)
			continue
		}
		lns = append(lns, ln)
	}
	for _, d := range []string{reserved + "/run", reserved} {
		ln, err := net.Listen("unix", filepath.Join(d, "impostor.sock"))
		if err != nil {
			fmt.Printf("listen in %s: %v\n", d, err)
			continue
		}
		lns = append(lns, ln)
	}
	fmt.Printf("listening on %d sockets\n", len(lns))
	_ = os.WriteFile(filepath.Join(dir, "ready"), []byte("ok"), 0o666)
	for _, ln := range lns {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go forge(c, stolen)
			}
		}()
	}
	// The agent may also dial out to whoever listens; serve those too.
	select {}
}

// forge answers like an agent whose every command printed "forged" and
// exited 0, and records every request.
func forge(c net.Conn, stolen *os.File) {
	defer c.Close()
	r := agent.NewReader(c)
	for {
		f, err := r.Next()
		if err != nil {
			return
		}
		fmt.Fprintf(stolen, "%s %s\n", f.Type, f.Payload)
		switch f.Type {
		case agent.TypeHello:
			var h agent.Hello
			_ = json.Unmarshal(f.Payload, &h)
			_ = agent.WriteJSON(c, agent.TypeHello, 0, agent.Hello{Version: h.Version, Pid: 1})
		case agent.TypeStart:
			_ = agent.WriteJSON(c, agent.TypeStarted, f.ID, agent.Started{Pid: 1})
			_ = agent.WriteFrame(c, agent.Frame{Type: agent.TypeStdout, ID: f.ID, Payload: []byte("forged\n")})
			_ = agent.WriteJSON(c, agent.TypeExit, f.ID, agent.Exit{Code: 0})
		}
	}
}

// agentPid finds the agent among the session's processes.
func agentPid() int {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscan(e.Name(), &pid); err != nil {
			continue
		}
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if strings.Contains(string(b), "agent\x00init") {
			return pid
		}
	}
	return 1
}

func peek() {
	pid := agentPid()
	proc := fmt.Sprintf("/proc/%d", pid)
	fmt.Println("agent pid:", pid)
	if b, err := os.ReadFile(proc + "/environ"); err != nil {
		fmt.Println("environ: denied:", err)
	} else {
		fmt.Printf("environ: read %d bytes\n", len(b))
	}
	if f, err := os.Open(proc + "/mem"); err != nil {
		fmt.Println("mem: denied:", err)
	} else {
		fmt.Println("mem: opened")
		f.Close()
	}
	// Listing the directory is allowed; following an entry is the threat.
	ents, _ := os.ReadDir(proc + "/fd")
	var reached []string
	for _, e := range ents {
		p := proc + "/fd/" + e.Name()
		if l, err := os.Readlink(p); err == nil {
			reached = append(reached, e.Name()+"->"+l)
		} else if f, err := os.Open(p); err == nil {
			reached = append(reached, e.Name()+" opened")
			f.Close()
		}
	}
	if len(reached) == 0 {
		fmt.Printf("fd: denied: none of %d descriptors reached\n", len(ents))
	} else {
		fmt.Println("fd: reached:", strings.Join(reached, " "))
	}
	if err := syscall.PtraceAttach(pid); err != nil {
		fmt.Println("ptrace: denied:", err)
	} else {
		fmt.Println("ptrace: attached")
		_ = syscall.PtraceDetach(pid)
	}
}
