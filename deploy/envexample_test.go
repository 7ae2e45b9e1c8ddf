package deploy_test

import (
	"os"
	"regexp"
	"testing"
)

// Every variable compose.yaml reads is in .env.example, which the README
// names as the list of every setting of the stack: a setting missing there
// is one a user cannot find, and one that is there but not read does nothing.
func TestEnvExampleListsEveryComposeVariable(t *testing.T) {
	t.Parallel()
	compose, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	example, err := os.ReadFile(".env.example")
	if err != nil {
		t.Fatal(err)
	}
	read := map[string]bool{}
	for _, m := range regexp.MustCompile(`\$\{([A-Z][A-Z0-9_]*)`).FindAllSubmatch(compose, -1) {
		read[string(m[1])] = true
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^(?:# ?)?([A-Z][A-Z0-9_]*)=`).FindAllSubmatch(example, -1) {
		listed[string(m[1])] = true
	}
	if len(read) == 0 || len(listed) == 0 {
		t.Fatalf("read %d variables from compose.yaml and %d from .env.example", len(read), len(listed))
	}
	for name := range read {
		if !listed[name] {
			t.Errorf("compose.yaml reads %s, which .env.example does not list", name)
		}
	}
	read["COMPOSE_PROJECT_NAME"] = true // Compose's own
	for name := range listed {
		if !read[name] {
			t.Errorf(".env.example lists %s, which compose.yaml does not read", name)
		}
	}
}
