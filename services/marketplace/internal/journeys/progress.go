package journeys

import "context"

// Progress receives the progress notifications a worker sends while it runs
// an action: their message and _meta (for agent workers, the agent's
// events under "meshwork/agent_event"). Both are the worker's output,
// untrusted; messages are bounded.
type Progress func(message string, meta map[string]any)

type progressKey struct{}

// WithProgress asks for the progress of the actions run with ctx: the
// worker is sent a progress token, and what it reports goes to p. It is a
// property of one request, so it travels with the request's context.
func WithProgress(ctx context.Context, p Progress) context.Context {
	return context.WithValue(ctx, progressKey{}, p)
}

func progressFrom(ctx context.Context) Progress {
	p, _ := ctx.Value(progressKey{}).(Progress)
	return p
}
