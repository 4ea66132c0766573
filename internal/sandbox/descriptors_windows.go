package sandbox

// CloseInheritedOnExec does nothing on Windows, where os/exec hands a child
// only the handles it names; see the Unix documentation.
func CloseInheritedOnExec() error { return nil }
