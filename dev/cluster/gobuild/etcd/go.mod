// Wrapper module used only to build the etcd binaries of the local test
// cluster. cluster/build.sh copies this file into the build cache and adds the
// require (and, for kubernetes, replace) directives from cluster/versions.env.
module disttrain.local/cluster/gobuild/etcd

go 1.26.0
