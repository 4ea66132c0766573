package agent

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// lookupUser resolves "user[:group]" as docker does, in the session's own
// /etc/passwd and /etc/group: a name must be listed there; a number need
// not be (its group is then 0 unless given). The user's supplementary
// groups are those /etc/group lists them in, so that the agent's own are
// never inherited.
func lookupUser(spec string) (*syscall.Credential, error) {
	return lookupUserIn(spec, "/etc/passwd", "/etc/group")
}

func lookupUserIn(spec, passwd, group string) (*syscall.Credential, error) {
	userPart, groupPart, hasGroup := strings.Cut(spec, ":")
	if userPart == "" || (hasGroup && groupPart == "") {
		return nil, fmt.Errorf("user %q: want user[:group]", spec)
	}
	users := readColonFile(passwd) // name:x:uid:gid:...
	cred := &syscall.Credential{Groups: []uint32{}}
	name := ""
	if n, err := strconv.ParseUint(userPart, 10, 32); err == nil {
		cred.Uid = uint32(n)
		for _, u := range users {
			if len(u) > 3 && u[2] == userPart {
				name = u[0]
				if g, err := strconv.ParseUint(u[3], 10, 32); err == nil {
					cred.Gid = uint32(g)
				}
				break
			}
		}
	} else {
		found := false
		for _, u := range users {
			if len(u) > 3 && u[0] == userPart {
				uid, err1 := strconv.ParseUint(u[2], 10, 32)
				gid, err2 := strconv.ParseUint(u[3], 10, 32)
				if err1 != nil || err2 != nil {
					return nil, fmt.Errorf("user %q: malformed entry in %s", userPart, passwd)
				}
				cred.Uid, cred.Gid, name, found = uint32(uid), uint32(gid), u[0], true
				break
			}
		}
		if !found {
			return nil, fmt.Errorf("unable to find user %s: no matching entries in %s", userPart, passwd)
		}
	}
	groups := readColonFile(group) // name:x:gid:member,member
	if hasGroup {
		if n, err := strconv.ParseUint(groupPart, 10, 32); err == nil {
			cred.Gid = uint32(n)
		} else {
			found := false
			for _, g := range groups {
				if len(g) > 2 && g[0] == groupPart {
					gid, err := strconv.ParseUint(g[2], 10, 32)
					if err != nil {
						return nil, fmt.Errorf("group %q: malformed entry in %s", groupPart, group)
					}
					cred.Gid, found = uint32(gid), true
					break
				}
			}
			if !found {
				return nil, fmt.Errorf("unable to find group %s: no matching entries in %s", groupPart, group)
			}
		}
	}
	if name != "" {
		for _, g := range groups {
			if len(g) < 4 {
				continue
			}
			for _, m := range strings.Split(g[3], ",") {
				if m == name {
					if gid, err := strconv.ParseUint(g[2], 10, 32); err == nil {
						cred.Groups = append(cred.Groups, uint32(gid))
					}
				}
			}
		}
	}
	return cred, nil
}

// readColonFile reads a passwd-style file; a missing file has no entries.
func readColonFile(path string) [][]string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out [][]string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, strings.Split(line, ":"))
	}
	return out
}
