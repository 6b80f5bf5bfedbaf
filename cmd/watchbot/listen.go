package main

import "github.com/urfave/cli/v2"

func listenCommand(abort <-chan struct{}) *cli.Command {
	return &cli.Command{Name: "listen", Usage: "supervise workers on a queue (being built)"}
}
