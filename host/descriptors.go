package host

import "github.com/runbox-dev/runbox/internal/sandbox"

// CloseInheritedOnExec marks every descriptor of the calling process above
// stderr close-on-exec, so that nothing the program starts afterwards
// inherits one by accident. Confined processes never need it: the sandbox
// passes on stdin, stdout and stderr only. An executor without a policy
// passes on what os/exec does, which includes any descriptor the program
// holds without close-on-exec (typically one its own parent left open), so
// a program that owns its process, such as a command-line tool, calls this
// once at start. It changes the whole process: a descriptor the program
// means to pass on implicitly must be passed explicitly afterwards
// (exec.Cmd.ExtraFiles). On Windows it does nothing: os/exec there hands
// a child only the handles it names.
func CloseInheritedOnExec() error { return sandbox.CloseInheritedOnExec() }
