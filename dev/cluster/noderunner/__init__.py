"""The local cluster's executing node: a process runner that does what a kubelet does for its pods.

Started by ``dev/cluster/up.sh`` with the machine's ``/usr/bin/python3`` (standard library only, so
it needs no venv). It registers the node ``disttrain-exec-0``, keeps its Lease and status fresh, and
runs the pods the scheduler binds to it: each pod in its own network namespace on a host bridge,
each container a real process in its own mount and UTS namespaces. See ``dev/cluster/README.md``
("The executing node") for exactly what is real and what stands in.
"""
