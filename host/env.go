package host

import (
	"os"
	"os/user"
	"strings"
	"sync"
)

// environ builds a child's complete environment: only extra with cleanEnv,
// the caller's whole environment with WithInheritEnv, and otherwise the
// base environment; extra entries are applied last and win.
func (e *Executor) environ(extra []string, cleanEnv, tty bool) []string {
	var env []string
	switch {
	case cleanEnv:
		env = make([]string, 0, len(extra))
	case e.cfg.inheritEnv:
		env = os.Environ()
	default:
		env = baseEnv(os.LookupEnv, tty, envFallback)
	}
	if e.conf != nil && !cleanEnv {
		// The executor's own HOME and TMPDIR, so that the caller's are
		// neither read nor written by default.
		env = append(env, "HOME="+e.conf.home, "TMPDIR="+e.conf.tmp)
	}
	env = append(env, extra...)
	return dedupEnv(env)
}

// baseEnv returns the small environment a child gets by default: each of
// baseEnvKeys (and TERM for a terminal) with the caller's value, or the
// platform fallback when the caller has none. Keys without a value are
// left out. lookup and fallback are parameters so that tests can plant
// values.
func baseEnv(lookup func(string) (string, bool), tty bool, fallback func(string) string) []string {
	keys := baseEnvKeys
	if tty {
		keys = append(keys[:len(keys):len(keys)], "TERM")
	}
	env := make([]string, 0, len(keys))
	for _, k := range keys {
		v, ok := lookup(k)
		if !ok || v == "" {
			v = fallback(k)
		}
		if v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// dedupEnv keeps the last entry of each key, in the position of its first
// occurrence.
func dedupEnv(env []string) []string {
	index := make(map[string]int, len(env))
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		k = envKey(k)
		if i, ok := index[k]; ok {
			out[i] = kv
			continue
		}
		index[k] = len(out)
		out = append(out, kv)
	}
	return out
}

// envValue returns the value of the last entry named key in env.
func envValue(env []string, key string) string {
	key = envKey(key)
	for i := len(env) - 1; i >= 0; i-- {
		k, v, _ := strings.Cut(env[i], "=")
		if envKey(k) == key {
			return v
		}
	}
	return ""
}

// currentUser is looked up once: os/user may parse /etc/passwd or call the
// system, which is too slow for every spawn.
var currentUser = sync.OnceValue(func() *user.User {
	u, err := user.Current()
	if err != nil {
		return nil
	}
	return u
})
