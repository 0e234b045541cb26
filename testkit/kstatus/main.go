// kstatus prints the verdict of kstatus (sigs.k8s.io/cli-utils/pkg/kstatus/status, the library
// behind kpt, Flux's health checks and Argo CD's) on each Kubernetes object it reads: one JSON
// object per line on standard input, one line `STATUS<TAB>MESSAGE` per object on standard
// output. The kube-fsm tests use it to read the status the engine stores as the ecosystem
// reads it, instead of restating kstatus's rules.
package main

import (
	"bufio"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
)

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 0, 1<<20), 16<<20)
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	for in.Scan() {
		if len(in.Bytes()) == 0 {
			continue
		}
		// Read as the API machinery reads objects (numbers as int64, as kstatus expects).
		object := &unstructured.Unstructured{}
		if err := object.UnmarshalJSON(in.Bytes()); err != nil {
			fmt.Fprintf(os.Stderr, "kstatus: not a Kubernetes object: %v\n", err)
			os.Exit(2)
		}
		result, err := status.Compute(object)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kstatus: %v\n", err)
			os.Exit(1)
		}
		fmt.Fprintf(out, "%s\t%s\n", result.Status, result.Message)
	}
	if err := in.Err(); err != nil {
		fmt.Fprintf(os.Stderr, "kstatus: %v\n", err)
		os.Exit(2)
	}
}
