package docker

import (
	"time"
)

// Label keys runbox puts on every container it creates, so that a sweep can
// find leaked sessions and tell whose they are.
const (
	// LabelKind marks a runbox-owned object; sessions carry "session".
	LabelKind = "dev.runbox.kind"
	// LabelOwner identifies the creating process as "hostname/pid/start"
	// (see Owner).
	LabelOwner = "dev.runbox.owner"
	// LabelCreated is the creation time in RFC 3339 form (UTC).
	LabelCreated = "dev.runbox.created"
)

// KindSession is the LabelKind value of a session container.
const KindSession = "session"

// sessionLabels merges the caller's labels with runbox's own; runbox's win so
// a sweep can trust them.
func sessionLabels(user map[string]string, owner string, now time.Time) map[string]string {
	l := make(map[string]string, len(user)+3)
	for k, v := range user {
		l[k] = v
	}
	l[LabelKind] = KindSession
	l[LabelOwner] = owner
	l[LabelCreated] = now.UTC().Format(time.RFC3339)
	return l
}

// snapshotLabels blanks runbox's session labels. The Engine merges a
// container's labels into a committed image and cannot delete one, so the
// values are overridden with "" instead: a sweep that matches
// LabelKind=session never selects a snapshot.
func snapshotLabels(extra map[string]string) map[string]string {
	l := make(map[string]string, len(extra)+3)
	for k, v := range extra {
		l[k] = v
	}
	l[LabelKind] = ""
	l[LabelOwner] = ""
	l[LabelCreated] = ""
	return l
}
