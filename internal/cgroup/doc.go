// Package cgroup creates, reuses, signals and removes the per-process
// cgroup v2 groups that the host backend runs each process tree in on
// Linux (cgroup.kill reaches every member, whatever it did to its session
// or process group, and cgroup.events says when the group is empty), and
// maps the caller's own cgroup to a directory on hybrid and v2 hosts. It
// has no code on other systems.
package cgroup
