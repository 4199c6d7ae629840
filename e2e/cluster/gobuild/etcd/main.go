// Command etcd is upstream etcd's server main, built from a pinned module
// version because etcd's own module carries replace directives that
// `go install` refuses.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
