package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/runbox-dev/runbox"
	"github.com/runbox-dev/runbox/docker"
)

// sessionFilter selects sessions as `--filter KEY=VALUE` says, in docker's
// spelling: label=K or label=K=V, name=SUBSTRING, id=PREFIX,
// status=STATE (state= too), ancestor=IMAGE, until=DURATION|TIMESTAMP.
// Filters with different keys must all match; repeated keys of one kind
// match when any of them does, as docker's do (labels must all match).
type sessionFilter map[string][]string

var filterKeys = map[string]bool{"label": true, "name": true, "id": true, "status": true, "ancestor": true, "until": true}

func parseFilters(args []string) (sessionFilter, error) {
	f := sessionFilter{}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if k == "state" {
			k = "status"
		}
		if !ok || !filterKeys[k] {
			return nil, fmt.Errorf("%w: --filter %q: want label=K[=V], name=, id=, status=, ancestor= or until=", runbox.ErrInvalidCommand, a)
		}
		if k == "until" {
			if _, err := untilTime(v, time.Now()); err != nil {
				return nil, err
			}
		}
		f[k] = append(f[k], v)
	}
	return f, nil
}

// untilTime reads until=: a duration before now, or a timestamp.
func untilTime(v string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(v); err == nil {
		return now.Add(-d), nil
	}
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02"} {
		if t, err := time.Parse(layout, v); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%w: --filter until=%q: want a duration (10m) or a timestamp (RFC 3339)", runbox.ErrInvalidCommand, v)
}

// match reports whether s passes every filter.
func (f sessionFilter) match(s docker.SessionInfo, now time.Time) bool {
	for _, l := range f["label"] {
		k, v, hasValue := strings.Cut(l, "=")
		got, ok := s.Labels[k]
		if !ok || (hasValue && got != v) {
			return false
		}
	}
	oneOf := func(key string, ok func(string) bool) bool {
		vals := f[key]
		if len(vals) == 0 {
			return true
		}
		for _, v := range vals {
			if ok(v) {
				return true
			}
		}
		return false
	}
	return oneOf("name", func(v string) bool { return strings.Contains(s.Name, v) }) &&
		oneOf("id", func(v string) bool { return strings.HasPrefix(s.ID, v) }) &&
		oneOf("status", func(v string) bool { return s.State == v }) &&
		oneOf("ancestor", func(v string) bool { return s.Image == v }) &&
		oneOf("until", func(v string) bool {
			t, err := untilTime(v, now)
			return err == nil && s.Created.Before(t)
		})
}
