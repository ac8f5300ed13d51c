package main

// TEMPORARY: placeholders while the foundation is being built in parallel.
// Whoever implements one of these deletes its line here and adds its own file.

import (
	"context"
	"errors"
	"io"
)

var errPending = errors.New("not built yet")

func runDev(context.Context, []string, io.Writer) error { return errPending }
