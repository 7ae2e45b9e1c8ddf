package action_test

import (
	"fmt"

	"github.com/meshwork/meshwork/pkg/action"
)

func ExampleDecode() {
	a, err := action.Decode([]byte(`{"type":"write","target":"notes/today.md","content":"# Today\n"}`))
	fmt.Println(a.Type, a.Target, err)

	_, err = action.Decode([]byte(`{"type":"read","target":"README.md","Target":"../../etc/passwd"}`))
	fmt.Println(err)

	_, err = action.Decode([]byte(`{"type":"exec","command":"go test ./..."}`))
	fmt.Println(err)
	// Output:
	// write notes/today.md <nil>
	// malformed action: keys "target" and "Target" differ only in case
	// malformed action: /command: want a list of strings, got a JSON string
}
