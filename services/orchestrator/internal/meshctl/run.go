package meshctl

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/meshwork/meshwork/services/orchestrator/api"

	"github.com/spf13/cobra"

	"github.com/meshwork/meshwork/services/orchestrator/internal/apiclient"
)

func (a *app) runCommand() *cobra.Command {
	var (
		in    inputFlags
		opts  struct{ thread string }
		watch bool
	)
	cmd := &cobra.Command{
		Use:   "run PIPELINE",
		Short: "Start a run of a pipeline",
		Long: `Start a run of a pipeline and print its id.

Inputs come from --inputs-file (a JSON object; - reads stdin), then
--input key=value (a string, or a number or boolean when the pipeline's input
has that type) and --input-json key=<JSON>, which override the file.

With --watch, meshctl follows the run live, one line per node change, and
ends with the run's status and outputs. It exits 0 when the run succeeded, 2
when it waits for an approval, 1 when it failed or was cancelled. Ctrl-C
stops watching, not the run: follow it again with meshctl runs watch.`,
		Example: `  meshctl run research_pipeline --input task="Compare B-trees and LSM trees" --watch
  meshctl run research_pipeline --inputs-file inputs.json --thread team-a`,
		Args: exactArgs("PIPELINE"),
		RunE: a.runE(func(ctx context.Context, cmd *cobra.Command, c *apiclient.Client, args []string) error {
			inputs, err := in.collect(ctx, c, args[0], cmd.InOrStdin())
			if err != nil {
				return err
			}
			run, err := c.StartRun(ctx, api.StartRequest{Pipeline: args[0], Inputs: inputs, Thread: opts.thread})
			if err != nil {
				return err
			}
			return a.started(ctx, cmd, c, run, watch, fmt.Sprintf("Run %s of %s started.", run.ID, run.Pipeline))
		}),
	}
	f := cmd.Flags()
	f.StringArrayVarP(&in.values, "input", "i", nil, "an input as key=value (repeatable)")
	f.StringArrayVar(&in.jsonValues, "input-json", nil, "an input as key=<JSON>, such as depth=3 or tags='[\"a\"]' (repeatable)")
	f.StringVar(&in.file, "inputs-file", "", "a JSON object of inputs (- for stdin)")
	f.StringVar(&opts.thread, "thread", "", "continue the role sessions of earlier runs on this thread (default: a new thread)")
	f.BoolVarP(&watch, "watch", "w", false, "follow the run until it ends or waits for an approval")
	return cmd
}

// inputFlags are the inputs of a run as flags give them.
type inputFlags struct {
	values     []string
	jsonValues []string
	file       string
}

// collect merges the inputs: the file first, the flags over it. A key=value
// input whose pipeline input is a number or a boolean is converted, when it
// parses as one; the server checks the rest.
func (in inputFlags) collect(ctx context.Context, c *apiclient.Client, pipelineName string, stdin io.Reader) (map[string]any, error) {
	inputs := map[string]any{}
	if in.file != "" {
		if err := readJSONFile(in.file, stdin, &inputs); err != nil {
			return nil, fmt.Errorf("--inputs-file: %w", err)
		}
	}
	given := map[string]string{}
	setFlag := func(flag, kv string) (string, string, error) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return "", "", fmt.Errorf("%s %q: want key=value", flag, kv)
		}
		if prev, dup := given[k]; dup {
			return "", "", fmt.Errorf("input %q is given twice (%s and %s)", k, prev, flag)
		}
		given[k] = flag
		return k, v, nil
	}
	var types map[string]api.InputType
	if len(in.values) > 0 {
		var err error
		if types, err = inputTypes(ctx, c, pipelineName); err != nil {
			return nil, err
		}
	}
	for _, kv := range in.values {
		k, v, err := setFlag("--input", kv)
		if err != nil {
			return nil, err
		}
		inputs[k] = typed(v, types[k])
	}
	for _, kv := range in.jsonValues {
		k, v, err := setFlag("--input-json", kv)
		if err != nil {
			return nil, err
		}
		var value any
		if err := json.Unmarshal([]byte(v), &value); err != nil {
			return nil, fmt.Errorf("--input-json %s: %s is not JSON: %w", k, v, err)
		}
		inputs[k] = value
	}
	return inputs, nil
}

// inputTypes returns the types of a pipeline's inputs, or none when the
// pipeline is unknown (starting the run then says so).
func inputTypes(ctx context.Context, c *apiclient.Client, name string) (map[string]api.InputType, error) {
	ps, err := c.Pipelines(ctx)
	if err != nil {
		return nil, err
	}
	types := map[string]api.InputType{}
	for _, p := range ps {
		if p.Name == name {
			for k, in := range p.Inputs {
				types[k] = in.Type
			}
		}
	}
	return types, nil
}

// typed converts a key=value input to its pipeline input's type when it
// parses as that type.
func typed(v string, t api.InputType) any {
	switch t {
	case api.TypeNumber:
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			return f
		}
	case api.TypeBoolean:
		if b, err := strconv.ParseBool(v); err == nil {
			return b
		}
	}
	return v
}

// readJSONFile decodes a JSON file (- for stdin) into v, refusing unknown
// fields when v is a struct.
func readJSONFile(name string, stdin io.Reader, v any) error {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if dec.More() {
		return fmt.Errorf("%s: more than one JSON value", name)
	}
	return nil
}

// started reports a run just started (or forked): its id, or with watch the
// banner and then its progress until it ends or waits.
func (a *app) started(ctx context.Context, cmd *cobra.Command, c *apiclient.Client, run api.Run, watch bool, banner string) error {
	out := cmd.OutOrStdout()
	switch {
	case watch:
		if !a.json() {
			if _, err := fmt.Fprintln(out, banner); err != nil {
				return err
			}
			// Where to follow the run's nodes in a tracing UI (Grafana).
			if run.TraceID != "" {
				if _, err := fmt.Fprintf(out, "Trace: %s\n", run.TraceID); err != nil {
					return err
				}
			}
		}
		return a.watch(ctx, cmd, c, run.ID, -1)
	case a.json():
		return printJSON(out, run)
	default:
		_, err := fmt.Fprintln(out, run.ID)
		return err
	}
}
