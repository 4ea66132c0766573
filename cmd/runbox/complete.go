package main

import (
	"context"
	"strings"
	"time"

	"github.com/moby/moby/client"
	"github.com/spf13/cobra"

	"github.com/runbox-dev/runbox/docker"
)

// completeTimeout bounds a completion's round trip: a shell waits for it.
const completeTimeout = 3 * time.Second

// completeSessions completes session names and short IDs, for every
// argument (close, renew, inspect) or only the first (exec, shell, ...).
func completeSessions(every bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 && !every {
			return nil, cobra.ShellCompDirectiveDefault
		}
		ctx, cancel := context.WithTimeout(context.Background(), completeTimeout)
		defer cancel()
		e, err := docker.New(engineOptions()...)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer e.Close()
		sessions, err := e.Sessions(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, s := range sessions {
			desc := s.Image + ", " + s.State
			if s.Name != "" && strings.HasPrefix(s.Name, toComplete) {
				out = append(out, cobra.CompletionWithDesc(s.Name, desc))
			}
			if id := shortID(s.ID); strings.HasPrefix(id, toComplete) {
				out = append(out, cobra.CompletionWithDesc(id, desc))
			}
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeImages completes local image references for the first argument.
func completeImages(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveDefault
	}
	ctx, cancel := context.WithTimeout(context.Background(), completeTimeout)
	defer cancel()
	e, err := docker.New(engineOptions()...)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer e.Close()
	res, err := e.Client().ImageList(ctx, client.ImageListOptions{})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, img := range res.Items {
		for _, tag := range img.RepoTags {
			if tag != "<none>:<none>" && strings.HasPrefix(tag, toComplete) {
				out = append(out, tag)
			}
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// addCompletions gives the commands that take sessions or images dynamic
// completion of them.
func addCompletions(root *cobra.Command) {
	for _, c := range root.Commands() {
		switch c.Name() {
		case "close", "renew", "inspect":
			c.ValidArgsFunction = completeSessions(true)
		case "exec", "shell", "snapshot", "logs":
			c.ValidArgsFunction = completeSessions(false)
		case "open", "run":
			c.ValidArgsFunction = completeImages
		}
	}
}
