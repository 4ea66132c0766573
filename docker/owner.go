package docker

import (
	"os"
	"strconv"
	"strings"

	"github.com/runbox-dev/runbox/internal/procstart"
)

// Owner is what the LabelOwner label records about the process that
// created a session: "host/pid/start", where start identifies when that
// process started, so that a later process that got the same pid is never
// taken for the owner. Labels written before start was recorded, or on a
// platform that does not tell, are "host/pid"; "host/cli" marks a session
// that belongs to a user rather than to a process.
type Owner struct {
	// Host is the creator's hostname.
	Host string
	// PID is the creator's process ID; 0 when the owner is not a process.
	PID int
	// Start is the creator's start time as procstart reports it (on Linux,
	// clock ticks since boot); "" when unknown.
	Start string
}

// String formats o as a LabelOwner value.
func (o Owner) String() string {
	s := o.Host + "/" + strconv.Itoa(o.PID)
	if o.Start != "" {
		s += "/" + o.Start
	}
	return s
}

// ParseOwner parses a LabelOwner value naming a process. It reports false
// for anything else, such as "host/cli" or a label of another tool.
func ParseOwner(label string) (Owner, bool) {
	parts := strings.Split(label, "/")
	if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
		return Owner{}, false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil || pid <= 0 {
		return Owner{}, false
	}
	o := Owner{Host: parts[0], PID: pid}
	if len(parts) == 3 {
		if parts[2] == "" {
			return Owner{}, false
		}
		o.Start = parts[2]
	}
	return o, true
}

// defaultOwner names the current process, with its start time where the
// platform tells it.
func defaultOwner() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		h = "unknown-host"
	}
	o := Owner{Host: h, PID: os.Getpid()}
	if st, err := procstart.Of(o.PID); err == nil {
		o.Start = st.ID
	}
	return o.String()
}
